// Package kubetest adapts a client-go clientset (the fake one in unit tests, a real one in
// the cluster suite) to the kubernetes backend's Client. Only tests import it: the backend
// itself must not link the clientset, whose scheme slows the start of every airlock process.
package kubetest

import (
	"context"
	"io"
	"net/url"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
)

// Client is a clientset seen as the backend's Client (sandbox/kubernetes.Client, which it
// satisfies without importing it, so that the backend's own tests can use it).
type Client struct{ cs kubernetes.Interface }

// Wrap adapts cs.
func Wrap(cs kubernetes.Interface) *Client { return &Client{cs: cs} }

func (c *Client) GetService(ctx context.Context, namespace, name string) (*corev1.Service, error) {
	return c.cs.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (c *Client) CreateNetworkPolicy(ctx context.Context, namespace string, np *networkingv1.NetworkPolicy) (*networkingv1.NetworkPolicy, error) {
	return c.cs.NetworkingV1().NetworkPolicies(namespace).Create(ctx, np, metav1.CreateOptions{})
}

func (c *Client) DeleteNetworkPolicy(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error {
	return c.cs.NetworkingV1().NetworkPolicies(namespace).Delete(ctx, name, opts)
}

func (c *Client) CreateSecret(ctx context.Context, namespace string, s *corev1.Secret) (*corev1.Secret, error) {
	return c.cs.CoreV1().Secrets(namespace).Create(ctx, s, metav1.CreateOptions{})
}

func (c *Client) DeleteSecret(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error {
	return c.cs.CoreV1().Secrets(namespace).Delete(ctx, name, opts)
}

func (c *Client) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return c.cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (c *Client) CreatePod(ctx context.Context, namespace string, p *corev1.Pod) (*corev1.Pod, error) {
	return c.cs.CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{})
}

func (c *Client) DeletePod(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error {
	return c.cs.CoreV1().Pods(namespace).Delete(ctx, name, opts)
}

func (c *Client) PodLogs(ctx context.Context, namespace, name string, opts *corev1.PodLogOptions) (io.ReadCloser, error) {
	return c.cs.CoreV1().Pods(namespace).GetLogs(name, opts).Stream(ctx)
}

// PodExecURL is the clientset's own exec URL. The fake clientset has no REST client; its
// tests set an Execer, which never asks for the URL.
func (c *Client) PodExecURL(namespace, name string, opts *corev1.PodExecOptions) *url.URL {
	return c.cs.CoreV1().RESTClient().Post().Namespace(namespace).Resource("pods").Name(name).
		SubResource("exec").VersionedParams(opts, scheme.ParameterCodec).URL()
}
