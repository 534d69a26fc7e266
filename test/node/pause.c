// The test node's sandbox ("pause") image (scripts/node.sh): holds a pod's namespaces and does
// nothing else; reaps what is reparented to it, ends on SIGTERM or SIGINT. Built static, so the
// image is this one file.
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

static void Stop(int sig) {
  (void)sig;
  _exit(0);
}

static void Reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  signal(SIGINT, Stop);
  signal(SIGTERM, Stop);
  signal(SIGCHLD, Reap);
  for (;;) pause();
}
