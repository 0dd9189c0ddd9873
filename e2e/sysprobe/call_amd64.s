#include "textflag.h"

// DFL sets signal sig to its default action: rt_sigaction(sig, sigdfl, NULL, 8), where
// sigdfl is a zeroed struct sigaction.
#define DFL(sig) MOVQ $13, AX; MOVQ $sig, DI; MOVQ sigdfl+64(FP), SI; XORQ DX, DX; MOVQ $8, R10; SYSCALL

// func forkCall(abi, nr, a0, a1, a2, a3, a4, a5 uintptr, sigdfl unsafe.Pointer) (pid uintptr)
//
// Forks (clone with SIGCHLD only: a copy of the process with just this thread) and returns
// the child's pid (or -errno). The child runs no Go code: it resets the signals a refused
// or faulting call may raise to their default action, makes the one system call through
// the chosen entry (abi 1: int $0x80, the i386 ABI; otherwise the syscall instruction,
// with the x32 bit already in nr for x32), and exits with 0 when the call succeeded or its
// errno when it failed. A call the kernel's seccomp filter kills ends the child by SIGSYS.
TEXT ·forkCall(SB), NOSPLIT, $0-80
	MOVQ	$56, AX // clone
	MOVQ	$17, DI // SIGCHLD
	XORQ	SI, SI
	XORQ	DX, DX
	XORQ	R10, R10
	XORQ	R8, R8
	XORQ	R9, R9
	SYSCALL
	CMPQ	AX, $0
	JEQ	child
	MOVQ	AX, pid+72(FP)
	RET

child:
	DFL(4)  // SIGILL
	DFL(7)  // SIGBUS
	DFL(11) // SIGSEGV
	DFL(31) // SIGSYS
	MOVQ	abi+0(FP), R12
	MOVQ	nr+8(FP), AX
	CMPQ	R12, $1
	JEQ	i386
	MOVQ	a0+16(FP), DI
	MOVQ	a1+24(FP), SI
	MOVQ	a2+32(FP), DX
	MOVQ	a3+40(FP), R10
	MOVQ	a4+48(FP), R8
	MOVQ	a5+56(FP), R9
	SYSCALL
	JMP	done

i386:
	MOVQ	a0+16(FP), BX
	MOVQ	a1+24(FP), CX
	MOVQ	a2+32(FP), DX
	MOVQ	a3+40(FP), SI
	MOVQ	a4+48(FP), DI
	MOVQ	a5+56(FP), BP
	INT	$0x80
	MOVLQSX	AX, AX // the 32-bit result, sign-extended

done:
	XORQ	DI, DI
	CMPQ	AX, $0
	JGE	exit // success
	CMPQ	AX, $-4095
	JLT	exit // not an error number: success
	MOVQ	AX, DI
	NEGQ	DI

exit:
	MOVQ	$231, AX // exit_group
	SYSCALL
	INT	$3
