/* An LD_PRELOAD library that makes every new thread of a program block for a while before it
 * runs its start routine: it wraps pthread_create, and the new thread sleeps NAP_MS first. In a
 * CPython program this is a Python thread blocking before it bound the thread state its parent
 * made for it (threading.Thread.start: the state is in the interpreter's list before the thread
 * runs; 3.10 and 3.11 give it the parent's thread ids until the thread takes it, 3.12+ zeros).
 * A malloc lock or a page-in does that by chance in the thread's first instants; this does it
 * every time, for the off-CPU profile's test (tests/e2e/test_profile.cpp). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

enum { NAP_MS = 50 };

struct slow_start {
	void *(*fn)(void *);
	void *arg;
};

static void *nap_then_start(void *p)
{
	struct slow_start s = *(struct slow_start *)p;
	free(p);
	struct timespec nap = {0, NAP_MS * 1000000L};
	nanosleep(&nap, NULL); /* a blocking switch before the thread's own code ran */
	return s.fn(s.arg);
}

int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
	if (!real)
		real = (int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *))dlsym(
			RTLD_NEXT, "pthread_create");
	struct slow_start *s = malloc(sizeof(*s));
	if (!real || !s) {
		free(s);
		return real ? real(thread, attr, fn, arg) : 11; /* EAGAIN */
	}
	s->fn = fn;
	s->arg = arg;
	int err = real(thread, attr, nap_then_start, s);
	if (err)
		free(s);
	return err;
}
