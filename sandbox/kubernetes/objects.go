package kubernetes

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/airlock-proxy/airlock/internal/identity"
	"github.com/airlock-proxy/airlock/sandbox"
)

// Secret keys.
const (
	keyProxyURL = "proxy-url"
	keyCABundle = "ca-bundle.pem"
)

var nameID = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,53}[a-z0-9])?$`)

// checkID refuses sandbox ids that are not valid in object names: the one rule of
// identity.CheckID, shorter (object names add a prefix) and ending in a letter or digit.
func checkID(id string) error {
	if err := identity.CheckID(id); err != nil {
		return err
	}
	if !nameID.MatchString(id) {
		return fmt.Errorf("sandbox id %q: the kubernetes backend needs 1-55 lower-case letters, digits or '-'", id)
	}
	return nil
}

// podGracePeriod is the sandbox pod's termination grace period in seconds: short (the idle
// process is killed after it), but never 0, which makes a deletion a force deletion (see
// instance.close).
const podGracePeriod = 1

// objects are what one sandbox is made of.
type objects struct {
	Secret        *corev1.Secret
	NetworkPolicy *networkingv1.NetworkPolicy
	Pod           *corev1.Pod
}

func (b *Backend) labels(o sandbox.Options) map[string]string {
	return map[string]string{
		LabelSandbox:                   o.ID,
		"app.kubernetes.io/name":       "airlock-sandbox",
		"app.kubernetes.io/managed-by": "airlock",
	}
}

// buildObjects turns validated sandbox options into the sandbox's objects. proxyIP is the
// proxy Service's cluster IP; token the sandbox's proxy credential.
func (b *Backend) buildObjects(o sandbox.Options, proxyIP, token string) (objects, error) {
	if err := checkID(o.ID); err != nil {
		return objects{}, err
	}
	if o.Workspace != "" {
		return objects{}, fmt.Errorf("workspace %s: host directories are not available on a cluster; use the backend's workspace claim", o.Workspace)
	}
	if o.WorkspaceMode == sandbox.WorkspaceCoW && b.opts.WorkspaceClaim != "" {
		return objects{}, fmt.Errorf("workspace mode cow: not supported by the kubernetes backend (use rw or ro)")
	}
	if len(o.ReadOnlyPaths) > 0 {
		return objects{}, fmt.Errorf("read-only paths %v: host paths are not available on a cluster; build them into the image", o.ReadOnlyPaths)
	}
	name := objectName(o.ID)
	meta := metav1.ObjectMeta{Name: name, Namespace: b.opts.Namespace, Labels: b.labels(o)}
	proxyURL := (&url.URL{Scheme: "http", User: url.UserPassword(o.ID, token),
		Host: net.JoinHostPort(proxyIP, strconv.Itoa(b.opts.ProxyPort))}).String()
	secret := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: meta,
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{keyProxyURL: []byte(proxyURL)},
	}
	if len(o.CABundle) > 0 {
		secret.Data[keyCABundle] = o.CABundle
	}
	proxyAddr := net.JoinHostPort(proxyIP, strconv.Itoa(b.opts.ProxyPort))
	return objects{Secret: secret, NetworkPolicy: b.networkPolicy(o, meta), Pod: b.pod(o, meta, proxyAddr, len(o.CABundle) > 0)}, nil
}

// networkPolicy allows the sandbox's pod no ingress and egress only to the proxy's pods.
func (b *Backend) networkPolicy(o sandbox.Options, meta metav1.ObjectMeta) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	port := intstr.FromInt32(int32(b.opts.ProxyPort))
	return &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: meta,
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelSandbox: o.ID}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
						"kubernetes.io/metadata.name": b.opts.ProxyNamespace}},
					PodSelector: &metav1.LabelSelector{MatchLabels: b.opts.ProxySelector},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
			}},
		},
	}
}

// confinementTimeout bounds the init container's wait for the pod's NetworkPolicy; at most
// half the start timeout, so that its reason reaches Create.
func (b *Backend) confinementTimeout() time.Duration {
	return min(time.Minute, b.opts.StartTimeout/2)
}

func (b *Backend) pod(o sandbox.Options, meta metav1.ObjectMeta, proxyAddr string, withCA bool) *corev1.Pod {
	no, yes := false, true
	uid := b.opts.User
	tmp := resource.NewQuantity(o.TmpSize, resource.BinarySI)
	secretRef := func(env string) corev1.EnvVar {
		return corev1.EnvVar{Name: env, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: meta.Name}, Key: keyProxyURL}}}
	}
	env := []corev1.EnvVar{
		{Name: "PATH", Value: sandbox.DefaultPath}, {Name: "HOME", Value: sandbox.HomeDir},
		secretRef("HTTP_PROXY"), secretRef("HTTPS_PROXY"), secretRef("http_proxy"), secretRef("https_proxy"),
		{Name: "NO_PROXY", Value: ""}, {Name: "no_proxy", Value: ""},
	}
	volumes := []corev1.Volume{
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: tmp}}},
		{Name: "home", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: tmp}}},
	}
	mounts := []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}, {Name: "home", MountPath: sandbox.HomeDir}}
	if withCA {
		mode := int32(0o444)
		volumes = append(volumes, corev1.Volume{Name: "airlock-ca", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: meta.Name, DefaultMode: &mode, Items: []corev1.KeyToPath{{Key: keyCABundle, Path: keyCABundle}}}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "airlock-ca", MountPath: "/run/airlock", ReadOnly: true})
	}
	workdir := sandbox.HomeDir
	if b.opts.WorkspaceClaim != "" {
		volumes = append(volumes, corev1.Volume{Name: "workspace", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
			ClaimName: b.opts.WorkspaceClaim, ReadOnly: o.WorkspaceMode == sandbox.WorkspaceRO}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "workspace", MountPath: sandbox.WorkspaceDir, ReadOnly: o.WorkspaceMode == sandbox.WorkspaceRO})
		workdir = sandbox.WorkspaceDir
	}
	limits := corev1.ResourceList{}
	if o.Memory > 0 {
		limits[corev1.ResourceMemory] = *resource.NewQuantity(o.Memory, resource.BinarySI)
	}
	if o.CPUs > 0 {
		limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(o.CPUs*1000), resource.DecimalSI)
	}
	var runtimeClass *string
	if b.opts.RuntimeClassName != "" {
		rc := b.opts.RuntimeClassName
		runtimeClass = &rc
	}
	grace := int64(podGracePeriod)
	restricted := func() *corev1.SecurityContext {
		return &corev1.SecurityContext{
			AllowPrivilegeEscalation: &no, Privileged: &no, ReadOnlyRootFilesystem: &yes,
			RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid,
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}
	}
	check := []string{"sandbox", "confinement-check", "--proxy", proxyAddr, "--timeout", b.confinementTimeout().String()}
	if b.opts.ConfinementProbe != "" {
		check = append(check, "--forbidden", b.opts.ConfinementProbe)
	}
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: meta,
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			RestartPolicy:                 corev1.RestartPolicyNever,
			RuntimeClassName:              runtimeClass,
			TerminationGracePeriodSeconds: &grace,
			HostNetwork:                   false,
			HostPID:                       false,
			HostIPC:                       false,
			ShareProcessNamespace:         &no,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid, FSGroup: &uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			// The check runs airlock's image with its own entrypoint; it sees the proxy's
			// address and nothing of the sandbox (no Secret, no volumes).
			InitContainers: []corev1.Container{{
				Name:                     confinementContainer,
				Image:                    b.opts.InitImage,
				Args:                     check,
				SecurityContext:          restricted(),
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					corev1.ResourceMemory: resource.MustParse("128Mi"), corev1.ResourceCPU: resource.MustParse("500m")}},
				ImagePullPolicy: corev1.PullIfNotPresent,
			}},
			Containers: []corev1.Container{{
				Name:            containerName,
				Image:           b.opts.Image,
				Command:         b.opts.Idle,
				Env:             env,
				WorkingDir:      workdir,
				VolumeMounts:    mounts,
				Resources:       corev1.ResourceRequirements{Limits: limits},
				SecurityContext: restricted(),
				ImagePullPolicy: corev1.PullIfNotPresent,
			}},
			Volumes: volumes,
		},
	}
}
