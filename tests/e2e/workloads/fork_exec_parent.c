/* A launcher like torchrun: forks workers that exec a CUDA program, plus one worker that forks
 * again (a grandchild), and waits for them all. argv[1] is the program to exec; with argv[2],
 * the launcher first changes into that directory (argv[1] may then be relative to it); with
 * argv[3], it stays that many milliseconds after its workers exit (as launchers outlive them). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static pid_t spawn(const char *program)
{
	pid_t pid = fork();
	if (pid == 0) {
		execl(program, program, (char *)NULL);
		_exit(127);
	}
	return pid;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s PROGRAM [DIRECTORY [LINGER_MS]]\n", argv[0]);
		return 2;
	}
	if (argc > 2 && chdir(argv[2]) != 0) {
		perror(argv[2]);
		return 2;
	}
	spawn(argv[1]);
	spawn(argv[1]);
	pid_t middle = fork();
	if (middle == 0) {
		/* an intermediate process that does no CUDA itself */
		pid_t grandchild = spawn(argv[1]);
		int status;
		waitpid(grandchild, &status, 0);
		_exit(0);
	}
	int status, failures = 0;
	while (wait(&status) > 0)
		failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	if (argc > 3)
		usleep(1000 * atoi(argv[3]));
	return failures ? 1 : 0;
}
