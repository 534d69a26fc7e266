// ipmasq-launch COMMAND [ARGS...]: the image's entry point (docs/writes.md, "When it writes": its
// signals). Node resets every signal's disposition and mask when it starts, so for its first ~50 ms
// a SIGTERM ends it with 143 (as PID 1 the kernel drops it instead, and the pod waits out its grace
// period) and a SIGHUP with 129; no JavaScript can take that moment over. This process can: it
// holds every signal from its first instruction, runs the command as its child, and hands SIGTERM,
// SIGINT and SIGHUP on only once the child catches them (its SigCgt in /proc), so the agent's own
// handler decides from the first moment. Any other signal whose default would end or core-dump the
// launcher (SIGALRM, SIGPIPE, SIGQUIT, …) is handed on as SIGTERM: the agent always ends through
// its own clean path, never by the launcher's death (which kills it). SIGUSR1 and SIGUSR2 are never
// handed on (Node would open its inspector on SIGUSR1); the job-control stops (SIGTSTP, SIGTTIN,
// SIGTTOU) and the signals ignored by default are swallowed. As PID 1 it reaps every orphan, and it
// exits as the child does (128 + the signal that ended it). The ready pipe's ends are put at fd 3
// or above (fds 0-2 opened on /dev/null where closed), so the agent finds it whatever it was
// started with.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const int kForwarded[] = {SIGTERM, SIGINT, SIGHUP};

// Signals taken and never handed on: the inspector's, the job-control stops, and those whose
// default action is to do nothing (or to continue).
static int Swallowed(int sig) {
  switch (sig) {
    case SIGUSR1:
    case SIGUSR2:
    case SIGTSTP:
    case SIGTTIN:
    case SIGTTOU:
    case SIGCHLD:
    case SIGCONT:
    case SIGURG:
    case SIGWINCH:
      return 1;
    default:
      return 0;
  }
}

// A signal the child has not caught after this long is handed on anyway (its default action).
static const long kWaitMaxMs = 10 * 1000;

// Whether the child said its handlers are in place: a byte on the pipe, or the pipe closed.
static int Ready(int fd) {
  char byte;
  ssize_t n = read(fd, &byte, 1);
  return n >= 0 || (errno != EAGAIN && errno != EINTR);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: ipmasq-launch COMMAND [ARGS...]\n");
    return 2;
  }
  sigset_t held, previous;
  sigfillset(&held);  // SIGKILL and SIGSTOP are left out by the kernel
  sigprocmask(SIG_BLOCK, &held, &previous);
  // An ignored signal is dropped even while held (a shell's background job ignores SIGINT): default
  // dispositions, which a held signal never acts on.
  for (int s = 1; s < NSIG; s++)
    if (s != SIGKILL && s != SIGSTOP) signal(s, SIG_DFL);
  // Started with fd 0, 1 or 2 closed, the pipe would land there: the agent takes only fds >= 3.
  for (int fd = 0; fd < 3; fd++) {
    if (fcntl(fd, F_GETFD) >= 0) continue;
    int opened = open("/dev/null", O_RDWR);
    if (opened >= 0 && opened != fd) {
      dup2(opened, fd);
      close(opened);
    }
  }
  int ready_pipe[2];
  if (pipe(ready_pipe) != 0) {
    perror("ipmasq-launch: pipe");
    return 1;
  }
  for (int end = 0; end < 2; end++) {
    if (ready_pipe[end] >= 3) continue;
    int moved = fcntl(ready_pipe[end], F_DUPFD, 3);
    if (moved < 0) {
      perror("ipmasq-launch: fcntl");
      return 1;
    }
    close(ready_pipe[end]);
    ready_pipe[end] = moved;
  }
  const pid_t launcher = getpid();
  pid_t child = fork();
  if (child < 0) {
    perror("ipmasq-launch: fork");
    return 1;
  }
  if (child == 0) {
    // The child dies with the launcher: an agent left behind would hold the node's port and tables.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) _exit(1);
    sigprocmask(SIG_SETMASK, &previous, NULL);
    close(ready_pipe[0]);
    char fd[16];
    snprintf(fd, sizeof fd, "%d", ready_pipe[1]);
    setenv("IPMASQ_READY_FD", fd, 1);
    execvp(argv[1], argv + 1);
    fprintf(stderr, "ipmasq-launch: %s: %s\n", argv[1], strerror(errno));
    _exit(127);
  }
  close(ready_pipe[1]);
  fcntl(ready_pipe[0], F_SETFL, O_NONBLOCK);
  int ready = 0;
  unsigned pending = 0;  // signals received, not yet handed on: bit per signal number
  struct timespec since = {0, 0};
  for (;;) {
    // While a signal waits for the child's handler, look again every 5 ms.
    struct timespec tick = {0, 5 * 1000 * 1000};
    siginfo_t info;
    int sig = sigtimedwait(&held, &info, pending != 0 ? &tick : NULL);
    if (sig > 0 && !Swallowed(sig)) {
      int handed = SIGTERM;  // any other ending signal: the agent's clean path
      for (size_t i = 0; i < sizeof kForwarded / sizeof kForwarded[0]; i++)
        if (sig == kForwarded[i]) handed = sig;
      if (pending == 0) clock_gettime(CLOCK_MONOTONIC, &since);
      pending |= 1u << handed;
    }
    int status;
    pid_t ended;
    while ((ended = waitpid(-1, &status, WNOHANG)) > 0) {
      if (ended != child) continue;  // an orphan handed to PID 1
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      return 128 + WTERMSIG(status);
    }
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    const long waited =
        (now.tv_sec - since.tv_sec) * 1000 + (now.tv_nsec - since.tv_nsec) / 1000000;
    if (!ready && pending != 0) ready = Ready(ready_pipe[0]);
    for (size_t i = 0; i < sizeof kForwarded / sizeof kForwarded[0]; i++) {
      int s = kForwarded[i];
      if ((pending & (1u << s)) && (ready || waited > kWaitMaxMs)) {
        kill(child, s);
        pending &= ~(1u << s);
      }
    }
  }
}
