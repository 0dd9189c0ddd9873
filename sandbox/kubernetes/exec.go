package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"
)

// restExecer runs commands through the pods/exec subresource: WebSocket first, SPDY for
// API servers without it.
type restExecer struct {
	client Client
	config *rest.Config
}

func (r *restExecer) Exec(ctx context.Context, e Exec) (int, error) {
	u := r.client.PodExecURL(e.Namespace, e.Pod, &corev1.PodExecOptions{
		Container: e.Container, Command: e.Command,
		Stdin: e.Stdin != nil, Stdout: true, Stderr: true,
	})
	ws, err := remotecommand.NewWebSocketExecutor(r.config, http.MethodGet, u.String())
	if err != nil {
		return -1, fmt.Errorf("exec over websocket: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(r.config, http.MethodPost, u)
	if err != nil {
		return -1, fmt.Errorf("exec over spdy: %w", err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return -1, err
	}
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: e.Stdin, Stdout: e.Stdout, Stderr: e.Stderr})
	var exitErr utilexec.ExitError
	if errors.As(err, &exitErr) && exitErr.Exited() {
		return exitErr.ExitStatus(), nil
	}
	if err != nil {
		return -1, err
	}
	return 0, nil
}
