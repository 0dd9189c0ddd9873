package image

import (
	"context"
	"fmt"
	"io"
	"os"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"
)

// fromEngine returns the root of an image of the local Docker engine: its ID says whether
// the cache has it; if not, the image is exported (as `docker save` does) to a temporary
// file in the cache directory and unpacked from there. Nothing is pulled.
func (c *Cache) fromEngine(ctx context.Context, ref string) (string, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return "", fmt.Errorf("image %s: connect to the Docker engine: %w", ref, err)
	}
	defer cli.Close()
	info, err := cli.ImageInspect(ctx, ref)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", fmt.Errorf("image %s: not a file, and not an image of the local Docker engine (nothing is pulled)", ref)
		}
		return "", fmt.Errorf("image %s: %w", ref, err)
	}
	if root, ok := c.cached(info.ID); ok {
		return root, nil
	}
	// One export at a time (see Cache.busy; unpack takes busy itself, after it).
	c.exporting.Lock()
	defer c.exporting.Unlock()
	if root, ok := c.cached(info.ID); ok {
		return root, nil
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return "", fmt.Errorf("image cache: %w", err)
	}
	f, err := os.CreateTemp(c.Dir, "export-*.tar")
	if err != nil {
		return "", fmt.Errorf("image cache: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	rc, err := cli.ImageSave(ctx, []string{info.ID})
	if err != nil {
		return "", fmt.Errorf("image %s: export: %w", ref, err)
	}
	_, err = io.Copy(f, rc)
	rc.Close()
	if err != nil {
		return "", fmt.Errorf("image %s: export: %w", ref, err)
	}
	root, err := c.unpack(&tarArchive{f: f}, info.ID)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", ref, err)
	}
	return root, nil
}
