package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestMaskPathsAddAndTake(t *testing.T) {
	home, err := os.UserHomeDir()
	if err != nil {
		t.Skip("no home directory")
	}
	c := &Config{}
	c.Sandbox.MaskPaths = []string{"/srv/secrets/", "~/.config/gh"}
	c.Sandbox.UnmaskPaths = []string{"/etc/ssh", "/home/"}
	got, err := c.maskPaths()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/root", "/var/lib/docker", "/srv/secrets", filepath.Join(home, ".config/gh")} {
		if !slices.Contains(got, want) {
			t.Errorf("mask list lacks %s: %v", want, got)
		}
	}
	for _, gone := range []string{"/etc/ssh", "/home"} {
		if slices.Contains(got, gone) {
			t.Errorf("mask list still has %s, unmasked: %v", gone, got)
		}
	}
}

// A ~/ entry with no home to resolve it is refused, naming the key: dropping it would leave
// visible what the user asked to hide.
func TestMaskPathsTildeWithoutHome(t *testing.T) {
	for _, k := range []struct {
		key  string
		mask []string
		keep []string
	}{
		{"sandbox.mask_paths[1]", []string{"/srv/secrets", "~/.config/gh"}, nil},
		{"sandbox.unmask_paths[0]", nil, []string{"~/.ssh"}},
	} {
		c := &Config{}
		c.Sandbox.MaskPaths, c.Sandbox.UnmaskPaths = k.mask, k.keep
		got, err := c.maskPathsHome(func() string { return "" })
		if err == nil || !strings.Contains(err.Error(), k.key) || !strings.Contains(err.Error(), "set HOME") {
			t.Errorf("%s: got %v, %v; want an error naming %s and saying to set HOME", k.key, got, err, k.key)
		}
	}
	c := &Config{}
	c.Sandbox.MaskPaths = []string{"~/.config/gh"}
	got, err := c.maskPathsHome(func() string { return "/home/u" })
	if err != nil || !slices.Contains(got, "/home/u/.config/gh") {
		t.Errorf("with a home: got %v, %v; want /home/u/.config/gh in the list", got, err)
	}
}

// With $HOME unset the home comes from the user database.
func TestMaskPathsHomeFromUserDatabase(t *testing.T) {
	t.Setenv("HOME", "")
	h := userHome()
	if h == "" {
		t.Skip("no home directory in the user database for this uid")
	}
	c := &Config{}
	c.Sandbox.MaskPaths = []string{"~/.config/gh"}
	got, err := c.maskPaths()
	if err != nil || !slices.Contains(got, filepath.Join(h, ".config/gh")) {
		t.Errorf("got %v, %v; want %s in the list", got, err, filepath.Join(h, ".config/gh"))
	}
}
