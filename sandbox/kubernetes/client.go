package kubernetes

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"sync"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Client is the little of the Kubernetes API the backend uses: exactly what the Role in
// deploy/kubernetes/rbac.yaml grants. It is not client-go's clientset, whose scheme
// registers every API group when the package loads and so slows the start of every airlock
// process, sandboxes on Kubernetes or not. Errors are the API's (apierrors.IsNotFound and
// IsAlreadyExists apply). Tests adapt client-go's fake clientset with kubetest.Wrap.
type Client interface {
	GetService(ctx context.Context, namespace, name string) (*corev1.Service, error)

	CreateNetworkPolicy(ctx context.Context, namespace string, np *networkingv1.NetworkPolicy) (*networkingv1.NetworkPolicy, error)
	DeleteNetworkPolicy(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error

	CreateSecret(ctx context.Context, namespace string, s *corev1.Secret) (*corev1.Secret, error)
	DeleteSecret(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error

	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	CreatePod(ctx context.Context, namespace string, p *corev1.Pod) (*corev1.Pod, error)
	DeletePod(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error
	// PodLogs streams a container's log (the pods/log subresource).
	PodLogs(ctx context.Context, namespace, name string, opts *corev1.PodLogOptions) (io.ReadCloser, error)
	// PodExecURL is the URL of the pods/exec subresource for remotecommand.
	PodExecURL(namespace, name string, opts *corev1.PodExecOptions) *url.URL
}

// Connect returns a Client and its REST config: in-cluster when kubeconfig is empty and
// airlock runs in a pod, else from kubeconfig (or $KUBECONFIG / ~/.kube/config when empty).
func Connect(kubeconfig string) (Client, *rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	}
	if kubeconfig != "" || err != nil {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = kubeconfig
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes config: %w", err)
	}
	c, err := NewClient(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return c, cfg, nil
}

// apiScheme knows only the types the backend sends and receives: core v1, networking v1
// and the meta options and Status (in both group versions, as client-go's own scheme has
// them). It is built on first use, so that processes that never reach a cluster pay
// nothing for it.
var apiScheme = sync.OnceValue(func() *runtime.Scheme {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	utilruntime.Must(corev1.AddToScheme(s))
	utilruntime.Must(networkingv1.AddToScheme(s))
	return s
})

// restClient is the Client over REST: core v1 at /api, networking.k8s.io/v1 at /apis,
// sharing one HTTP client as a clientset's groups do.
type restClient struct {
	core, networking *rest.RESTClient
	params           runtime.ParameterCodec // for the log and exec options
}

// NewClient returns a Client for cfg.
func NewClient(cfg *rest.Config) (Client, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	s := apiScheme()
	codecs := serializer.NewCodecFactory(s)
	group := func(apiPath string, gv schema.GroupVersion) (*rest.RESTClient, error) {
		c := rest.CopyConfig(cfg)
		c.APIPath, c.GroupVersion = apiPath, &gv
		c.NegotiatedSerializer = codecs.WithoutConversion()
		if c.UserAgent == "" {
			c.UserAgent = rest.DefaultKubernetesUserAgent()
		}
		return rest.RESTClientForConfigAndClient(c, httpClient)
	}
	core, err := group("/api", corev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	networking, err := group("/apis", networkingv1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	return &restClient{core: core, networking: networking, params: runtime.NewParameterCodec(s)}, nil
}

func (c *restClient) GetService(ctx context.Context, namespace, name string) (*corev1.Service, error) {
	out := &corev1.Service{}
	return out, c.core.Get().Namespace(namespace).Resource("services").Name(name).Do(ctx).Into(out)
}

func (c *restClient) CreateNetworkPolicy(ctx context.Context, namespace string, np *networkingv1.NetworkPolicy) (*networkingv1.NetworkPolicy, error) {
	out := &networkingv1.NetworkPolicy{}
	return out, c.networking.Post().Namespace(namespace).Resource("networkpolicies").Body(np).Do(ctx).Into(out)
}

func (c *restClient) DeleteNetworkPolicy(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error {
	return c.networking.Delete().Namespace(namespace).Resource("networkpolicies").Name(name).Body(&opts).Do(ctx).Error()
}

func (c *restClient) CreateSecret(ctx context.Context, namespace string, s *corev1.Secret) (*corev1.Secret, error) {
	out := &corev1.Secret{}
	return out, c.core.Post().Namespace(namespace).Resource("secrets").Body(s).Do(ctx).Into(out)
}

func (c *restClient) DeleteSecret(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error {
	return c.core.Delete().Namespace(namespace).Resource("secrets").Name(name).Body(&opts).Do(ctx).Error()
}

func (c *restClient) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	return out, c.core.Get().Namespace(namespace).Resource("pods").Name(name).Do(ctx).Into(out)
}

func (c *restClient) CreatePod(ctx context.Context, namespace string, p *corev1.Pod) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	return out, c.core.Post().Namespace(namespace).Resource("pods").Body(p).Do(ctx).Into(out)
}

func (c *restClient) DeletePod(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error {
	return c.core.Delete().Namespace(namespace).Resource("pods").Name(name).Body(&opts).Do(ctx).Error()
}

func (c *restClient) PodLogs(ctx context.Context, namespace, name string, opts *corev1.PodLogOptions) (io.ReadCloser, error) {
	return c.core.Get().Namespace(namespace).Resource("pods").Name(name).SubResource("log").
		VersionedParams(opts, c.params).Stream(ctx)
}

func (c *restClient) PodExecURL(namespace, name string, opts *corev1.PodExecOptions) *url.URL {
	return c.core.Post().Namespace(namespace).Resource("pods").Name(name).SubResource("exec").
		VersionedParams(opts, c.params).URL()
}
