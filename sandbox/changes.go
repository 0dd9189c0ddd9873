package sandbox

import "errors"

// Change is one path changed in a copy-on-write workspace.
type Change struct {
	Path string `json:"path"` // relative to the workspace
	Kind string `json:"kind"` // "added", "modified" or "deleted"
	// Protected marks a change of git's own files or of a path host tools run or read as
	// configuration: a patch never carries it.
	Protected bool `json:"protected,omitempty"`
}

// ErrChangesIncomplete is wrapped by Changes' error when the list it returns may lack
// changes: a bound of PostRunLimits or a part of the tree that could not be read. The list
// holds every change found.
var ErrChangesIncomplete = errors.New("the change listing is incomplete")

// ErrPatchIncomplete is wrapped by a patch's error when the patch leaves changes out (named
// in '# airlock:' lines that git apply skips, and in the error): changes of paths host
// tools run or read (hostRun), FIFOs, sockets, devices, files over
// PostRunLimits.FileBytes, a patch over PatchBytes or Time, a change listing that could not
// see everything, or a host side that cannot be read.
var ErrPatchIncomplete = errors.New("the patch leaves changes out")
