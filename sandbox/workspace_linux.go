package sandbox

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mountWorkspace mounts the host workspace at dst. The mount is idmapped so that the
// workspace owner's files appear as owned by the sandbox user and what the sandbox writes is
// owned by the workspace owner on the host. In cow mode the idmapped tree is the lower layer
// of an overlay whose upper layer lives in the sandbox's state directory.
func mountWorkspace(cfg *holderConfig, dst string) error {
	if cfg.Workspace == "" {
		return nil
	}
	tree, err := unix.OpenTree(unix.AT_FDCWD, cfg.Workspace, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("clone workspace %s: %w", cfg.Workspace, err)
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if cfg.WorkspaceMode != string(WorkspaceRW) {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if cfg.IdmapFD >= 0 {
		attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
		attr.Userns_fd = uint64(cfg.IdmapFD)
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("idmap workspace %s: %w", cfg.Workspace, err)
	}
	target := dst
	if cfg.WorkspaceMode == string(WorkspaceCoW) {
		target = cfg.LowerDir
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("create mount point %s: %w", target, err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach workspace: %w", err)
	}
	if cfg.WorkspaceMode != string(WorkspaceCoW) {
		return nil
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", cfg.LowerDir, cfg.UpperDir, cfg.WorkDir)
	return mountAt("overlay", dst, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts)
}
