/* What entering the kernel costs a thread on this machine, by way of entry: a uprobe hit on an
 * instruction the kernel emulates (push), on one it must single-step (mov: a second trap, #DB),
 * on a 5-byte nop (which Linux 6.18+ turns into a call to a trampoline that makes a system call
 * instead of a trap), a system call, and a page fault. The probes are set by bench/trap_cost.sh
 * (bpftrace); this program only calls and times.
 *   kernel_entry push|mov|nop5 CALLS   ns per call of a function starting with that instruction
 *   kernel_entry syscall CALLS         ns per getppid system call
 *   kernel_entry fault PAGES           CPU ns per first touch of a fresh 4 KiB page
 * Prints "ns_per_call=X". Hand-written assembly: the instruction at each entry is the point. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

__asm__(".text\n"
	".globl entry_push\n.type entry_push,@function\nentry_push:\n"
	" push %rbx\n pop %rbx\n ret\n.size entry_push,.-entry_push\n"
	".globl entry_mov\n.type entry_mov,@function\nentry_mov:\n"
	" mov %rdi,%rax\n ret\n.size entry_mov,.-entry_mov\n"
	".globl entry_nop5\n.type entry_nop5,@function\nentry_nop5:\n"
	" .byte 0x0f,0x1f,0x44,0x00,0x00\n ret\n.size entry_nop5,.-entry_nop5\n");
long entry_push(long);
long entry_mov(long);
long entry_nop5(long);

static double ns(clockid_t clock)
{
	struct timespec t;
	clock_gettime(clock, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
	long n = argc == 3 ? atol(argv[2]) : 0;
	if (n <= 0) {
		fprintf(stderr, "usage: kernel_entry push|mov|nop5|syscall|fault COUNT\n");
		return 2;
	}
	const char *what = argv[1];
	long (*f)(long) = !strcmp(what, "push") ? entry_push
			  : !strcmp(what, "mov")  ? entry_mov
			  : !strcmp(what, "nop5") ? entry_nop5
						  : NULL;
	double t;
	if (f) {
		t = ns(CLOCK_MONOTONIC);
		for (long i = 0; i < n; i++)
			f(i);
		t = ns(CLOCK_MONOTONIC) - t;
	} else if (!strcmp(what, "syscall")) {
		t = ns(CLOCK_MONOTONIC);
		for (long i = 0; i < n; i++)
			syscall(SYS_getppid);
		t = ns(CLOCK_MONOTONIC) - t;
	} else if (!strcmp(what, "fault")) {
		size_t len = (size_t)n * 4096;
		volatile char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED) {
			perror("mmap");
			return 1;
		}
		madvise((void *)p, len, MADV_NOHUGEPAGE); /* one fault per page */
		t = ns(CLOCK_THREAD_CPUTIME_ID);
		for (long i = 0; i < n; i++)
			p[i * 4096] = 1;
		t = ns(CLOCK_THREAD_CPUTIME_ID) - t;
	} else {
		fprintf(stderr, "kernel_entry: unknown '%s' (push, mov, nop5, syscall, fault)\n", what);
		return 2;
	}
	printf("%s ns_per_call=%.1f\n", what, t / n);
	return 0;
}
