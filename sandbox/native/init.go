package native

import (
	"fmt"
	"os"
)

// Stage names are passed as argv[0] when the binary re-executes itself inside a sandbox.
const (
	stageHolder = "airlock-sandbox:holder"
	stageSpawn  = "airlock-sandbox:spawn"
	stageExec   = "airlock-sandbox:exec"
	stageUserNS = "airlock-sandbox:userns"
	// stageRootless starts a rootless sandbox's holder (C only: stage_linux.c).
	stageRootless = "airlock-sandbox:holder-rootless"
)

// Init runs the sandbox stages of a re-executed airlock binary. A program that creates
// sandboxes with the native backend must call Init first thing in main (and in TestMain):
// when the process is one of those stages, Init never returns; otherwise it returns at once.
//
//	func main() {
//		sandbox.Init()
//		...
//	}
func Init() {
	if len(os.Args) == 0 {
		return
	}
	var err error
	switch os.Args[0] {
	case stageHolder:
		err = runHolder()
	case stageSpawn:
		err = runSpawn()
	case stageExec:
		err = runExec()
	case stageUserNS:
		err = runUserNSKeeper()
	default:
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock sandbox: %v\n", err)
		os.Exit(125)
	}
	os.Exit(0)
}
