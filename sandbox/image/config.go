package image

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlock-proxy/airlock/sandbox"
)

// ResolveEngine is Resolve for a reference that must name an image of the local Docker
// engine: never a file or directory of the host (whoever names it cannot point airlock at
// host paths).
func (c *Cache) ResolveEngine(ctx context.Context, ref string) (string, error) {
	if ref == "" {
		return "", fmt.Errorf("image: empty reference")
	}
	return c.fromEngine(ctx, ref)
}

// LoadConfig reads what the configuration of the image unpacked at rootfs (a root Resolve
// returned) says about running it: its Env, WorkingDir and User. A root that is no cache
// entry (a plain directory) has none: nil.
func LoadConfig(rootfs string) (*sandbox.ImageConfig, error) {
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(rootfs), "config.json"))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	var doc struct {
		Config struct {
			Env        []string `json:"Env"`
			WorkingDir string   `json:"WorkingDir"`
			User       string   `json:"User"`
		} `json:"config"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	c := doc.Config
	return &sandbox.ImageConfig{Env: c.Env, WorkingDir: c.WorkingDir, User: c.User}, nil
}
