/* kvrs's pod sandbox process (the image kvrs.local/pause:1 that containerd's sandbox runs).
 * It holds the pod's namespaces open: it sleeps until SIGINT or SIGTERM and, being PID 1 of the
 * pod's PID namespace when that is shared, reaps every child that exits. Written for kvrs; built
 * static by scripts/node-components.sh so the image needs nothing else. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { _exit(sig == SIGTERM || sig == SIGINT ? 0 : 1); }

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction sa = {0};
  sa.sa_handler = stop;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sa.sa_handler = reap;
  sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
  sigaction(SIGCHLD, &sa, NULL);
  for (;;) pause();
}
