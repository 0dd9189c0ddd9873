package image

import (
	"os"
	"syscall"
)

func linkCount(fi os.FileInfo) uint64 { return uint64(fi.Sys().(*syscall.Stat_t).Nlink) }
