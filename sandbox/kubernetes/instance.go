package kubernetes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/airlock-proxy/airlock/sandbox"
)

// instance is one sandbox pod.
type instance struct {
	b     *Backend
	opts  sandbox.Options
	name  string
	token bool            // a proxy credential was issued for it
	made  map[string]bool // the kinds of object (kinds) that are its to delete

	teardown sandbox.Teardown
}

var _ sandbox.Instance = (*instance)(nil)

// kinds are a sandbox's objects, in the order Close deletes them (the policy last).
var kinds = []string{"pod", "secret", "networkpolicy"}

// Create makes the sandbox's Secret, NetworkPolicy and Pod and waits for the pod to run.
func (b *Backend) Create(ctx context.Context, o sandbox.Options) (inst sandbox.Instance, err error) {
	if err := checkID(o.ID); err != nil {
		return nil, err
	}
	ns := b.opts.Namespace
	in := &instance{b: b, opts: o, name: objectName(o.ID), made: map[string]bool{}}
	defer func() {
		if err != nil {
			_ = in.Close(context.WithoutCancel(ctx))
		}
	}()
	svc, err := b.opts.Client.GetService(ctx, b.opts.ProxyNamespace, b.opts.ProxyService)
	if err != nil {
		return nil, fmt.Errorf("proxy service %s/%s: %w", b.opts.ProxyNamespace, b.opts.ProxyService, err)
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return nil, fmt.Errorf("proxy service %s/%s has no cluster IP", b.opts.ProxyNamespace, b.opts.ProxyService)
	}
	// Before the credential: issuing one for a live sandbox's id would replace its own.
	if err := in.checkFree(ctx); err != nil {
		return nil, err
	}
	tok, err := b.opts.Tokens.IssueToken(ctx, sandbox.Identity{ID: o.ID, Labels: o.Labels})
	if err != nil {
		return nil, fmt.Errorf("issue proxy credential: %w", err)
	}
	in.token = true
	objs, err := b.buildObjects(o, svc.Spec.ClusterIP, tok)
	if err != nil {
		return nil, err
	}
	// The policy first: the pod must never run unconfined, not even for a moment.
	_, err = b.opts.Client.CreateNetworkPolicy(ctx, ns, objs.NetworkPolicy)
	if err := in.created("networkpolicy", err); err != nil {
		return nil, err
	}
	_, err = b.opts.Client.CreateSecret(ctx, ns, objs.Secret)
	if err := in.created("secret", err); err != nil {
		return nil, err
	}
	_, err = b.opts.Client.CreatePod(ctx, ns, objs.Pod)
	if err := in.created("pod", err); err != nil {
		return nil, err
	}
	if err := in.waitRunning(ctx); err != nil {
		return nil, err
	}
	b.opts.Logger.Debug("sandbox pod running", "sandbox", o.ID, "namespace", ns)
	return in, nil
}

// checkFree refuses, with ErrExists, a sandbox whose pod is there already (another
// airlock's live sandbox of the same id, in the same namespace), before a credential is
// issued for the id. Only the pod is looked at: the service account may read pods but not
// Secrets or NetworkPolicies (deploy/kubernetes/rbac.yaml); a leftover Secret or policy of
// that name makes its create fail with AlreadyExists, which created handles.
func (in *instance) checkFree(ctx context.Context) error {
	ns := in.b.opts.Namespace
	_, err := in.b.opts.Client.GetPod(ctx, ns, in.name)
	switch {
	case err == nil:
		return fmt.Errorf("sandbox %s %w (pod %s/%s)", in.opts.ID, sandbox.ErrExists, ns, in.name)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("look for pod %s/%s: %w", ns, in.name, err)
	}
	return nil
}

// created records the outcome err of creating the object of kind. An object that already
// exists is another sandbox's (one created since checkFree): nothing of that sandbox is
// this one's to delete, nor is the credential, which is revoked by sandbox id. Any other
// failure may still have made the object, which is then this sandbox's.
func (in *instance) created(kind string, err error) error {
	switch {
	case err == nil:
		in.made[kind] = true
		return nil
	case apierrors.IsAlreadyExists(err):
		in.token = false
		return fmt.Errorf("sandbox %s %w (%s %s/%s)", in.opts.ID, sandbox.ErrExists, kind, in.b.opts.Namespace, in.name)
	}
	in.made[kind] = true
	return fmt.Errorf("create %s: %w", kind, err)
}

func (in *instance) waitRunning(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, in.b.opts.StartTimeout)
	defer cancel()
	var last corev1.PodPhase
	var why string
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := in.b.opts.Client.GetPod(ctx, in.b.opts.Namespace, in.name)
		if err != nil {
			return false, err
		}
		last, why = p.Status.Phase, containersState(p)
		switch last {
		case corev1.PodRunning:
			return true, nil
		case corev1.PodFailed, corev1.PodSucceeded:
			return false, fmt.Errorf("pod %s ended (%s) before it ran: %s", in.name, last, cmp.Or(why, p.Status.Message))
		}
		return false, nil
	})
	if err != nil {
		if why != "" {
			return fmt.Errorf("wait for pod %s to run (last phase %q; %s): %w", in.name, last, why, err)
		}
		return fmt.Errorf("wait for pod %s to run (last phase %q): %w", in.name, last, err)
	}
	return nil
}

// containersState says why p's containers do not run: the confinement check that failed
// (its message), or what a container waits for (an image that cannot be pulled); "" when
// there is nothing to say.
func containersState(p *corev1.Pod) string {
	var out []string
	for _, st := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		switch {
		case st.State.Terminated != nil && st.State.Terminated.ExitCode != 0:
			t := st.State.Terminated
			out = append(out, fmt.Sprintf("container %s exited %d: %s", st.Name, t.ExitCode, strings.TrimSpace(cmp.Or(t.Message, t.Reason))))
		case st.State.Waiting != nil && st.State.Waiting.Reason != "" && st.State.Waiting.Reason != "PodInitializing":
			w := st.State.Waiting
			out = append(out, strings.TrimSpace(fmt.Sprintf("container %s waiting: %s %s", st.Name, w.Reason, w.Message)))
		}
	}
	return strings.Join(out, "; ")
}

// Run execs cmd in the pod. The command gets the built environment except the proxy
// variables, which the pod has from its Secret.
func (in *instance) Run(ctx context.Context, cmd sandbox.Command) (sandbox.Result, error) {
	if in.teardown.Closed() {
		return sandbox.Result{}, sandbox.ErrClosed
	}
	if cmd.TTY != nil {
		return sandbox.Result{}, fmt.Errorf("run %s: %w", cmd.Args[0], sandbox.ErrNoTTY)
	}
	if cmd.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cmd.Timeout)
		defer cancel()
	}
	limit := cmd.OutputLimit
	if limit <= 0 {
		limit = sandbox.DefaultOutputLimit
	}
	stdout, stderr := &capture{w: cmd.Stdout, limit: limit}, &capture{w: cmd.Stderr, limit: limit}
	res := sandbox.Result{Start: time.Now()}
	code, err := in.b.opts.Execer.Exec(ctx, Exec{
		Namespace: in.b.opts.Namespace, Pod: in.name, Container: containerName,
		Command: execCommand(cmd), Stdin: cmd.Stdin, Stdout: stdout, Stderr: stderr,
	})
	res.End = time.Now()
	res.ExitCode = code
	res.Stdout, res.Stderr, res.Truncated = stdout.buf, stderr.buf, stdout.dropped || stderr.dropped
	if err != nil && cmd.Timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		res.TimedOut, res.ExitCode = true, sandbox.ExitTimeout
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("run %s: %w", cmd.Args[0], err)
	}
	return res, nil
}

// proxyVars come from the pod's Secret, never from an exec request.
var proxyVars = map[string]bool{"HTTP_PROXY": true, "HTTPS_PROXY": true, "http_proxy": true, "https_proxy": true}

// execCommand wraps cmd so that it runs in its directory with its environment.
func execCommand(cmd sandbox.Command) []string {
	dir := cmd.Dir
	if dir == "" {
		dir = sandbox.HomeDir
	}
	out := []string{"/bin/sh", "-c", `cd "$0" && exec env "$@"`, dir}
	for _, kv := range cmd.Env {
		k, _, _ := strings.Cut(kv, "=")
		if !proxyVars[k] {
			out = append(out, kv)
		}
	}
	if strings.Contains(cmd.Args[0], "=") {
		// env would take it for an assignment.
		out = append(out, "/bin/sh", "-c", `exec "$0" "$@"`)
	}
	return append(out, cmd.Args...)
}

// Logs streams the pod's log (the output of its idle process and of anything the image
// writes there).
func (in *instance) Logs(ctx context.Context) (io.ReadCloser, error) {
	return in.b.opts.Client.PodLogs(ctx, in.b.opts.Namespace, in.name, &corev1.PodLogOptions{Container: containerName})
}

// Changes is nil: no copy-on-write workspace on Kubernetes.
func (in *instance) Changes() ([]sandbox.Change, error) { return nil, nil }

// Patch is nil: no copy-on-write workspace on Kubernetes.
func (in *instance) Patch() ([]byte, error) { return nil, nil }

// Close revokes the credential and deletes the pod, its Secret and its NetworkPolicy (the
// policy last, so the pod is never unconfined), those that it made. It is idempotent.
func (in *instance) Close(ctx context.Context) error {
	return in.teardown.Close(ctx, in.close)
}

func (in *instance) close(ctx context.Context) error {
	var errs []error
	if in.token {
		if err := in.b.opts.Tokens.RevokeToken(ctx, in.opts.ID); err != nil {
			errs = append(errs, fmt.Errorf("revoke proxy credential: %w", err))
		}
	}
	ns, c := in.b.opts.Namespace, in.b.opts.Client
	// Not 0: a pod deleted with a grace period of 0 is force-deleted, its object gone from
	// the API at once while its containers still run on the node, and the policy deleted
	// next would leave them unconfined. With a grace period the object stays until the
	// kubelet has stopped them, which waitGone waits for.
	grace := int64(podGracePeriod)
	// The NetworkPolicy goes only once the pod is known to be gone: a pod whose delete
	// failed, or that outlived waitGone, may still run, and without its policy nothing
	// would confine it. The policy is then left with the pod, and Close says so: the
	// operator deletes the pod, then the policy (a restarted airlock's adoption does it
	// in that order too).
	podGone := true
	for _, kind := range kinds {
		if !in.made[kind] {
			continue // not made by this sandbox: another's of the same name, or none
		}
		if kind == "networkpolicy" && !podGone {
			errs = append(errs, fmt.Errorf("networkpolicy %s/%s kept: pod %s may still run, and the policy is what confines it (delete the pod, then the policy)", ns, in.name, in.name))
			continue
		}
		var err error
		switch kind {
		case "pod":
			err = c.DeletePod(ctx, ns, in.name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
		case "secret":
			err = c.DeleteSecret(ctx, ns, in.name, metav1.DeleteOptions{})
		case "networkpolicy":
			err = c.DeleteNetworkPolicy(ctx, ns, in.name, metav1.DeleteOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s %s/%s: %w", kind, ns, in.name, err))
			if kind == "pod" {
				podGone = false
			}
		}
		if kind == "pod" && err == nil {
			if werr := in.waitGone(ctx); werr != nil {
				errs = append(errs, werr)
				podGone = false
			}
		}
	}
	return errors.Join(errs...)
}

// waitGone waits for the pod to be deleted (its containers stopped), so that its policy
// outlives it.
func (in *instance) waitGone(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, in.b.opts.StartTimeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := in.b.opts.Client.GetPod(ctx, in.b.opts.Namespace, in.name)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		return fmt.Errorf("wait for pod %s to go: %w", in.name, err)
	}
	return nil
}

// capture streams to w and keeps the first limit bytes.
type capture struct {
	w       io.Writer
	limit   int
	buf     []byte
	dropped bool
}

func (c *capture) Write(p []byte) (int, error) {
	room := c.limit - len(c.buf)
	if room >= len(p) {
		c.buf = append(c.buf, p...)
	} else {
		c.buf = append(c.buf, p[:max(room, 0)]...)
		c.dropped = true
	}
	if c.w != nil {
		if _, err := c.w.Write(p); err != nil {
			c.w = nil
		}
	}
	return len(p), nil
}
