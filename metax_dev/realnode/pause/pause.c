/*
 * pause: the sandbox ("infra") container of a test pod on a MetaX operator real node.
 *
 * It holds the pod's namespaces open and does nothing else: it sleeps until a signal
 * arrives, reaps any child that exits (it may be PID 1 of the pod), and exits on
 * SIGINT or SIGTERM. Built with `gcc -static` by metax_dev/controlplane/build.py and
 * packed into a local OCI image by metax_dev/realnode/images.py (docs/realnode.md).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop_requested;

static void on_stop(int sig) { (void)sig; stop_requested = 1; }

static void on_child(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

static void handle(int sig, void (*fn)(int)) {
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_handler = fn;
    sigemptyset(&action.sa_mask);
    if (sigaction(sig, &action, NULL) != 0) {
        perror("sigaction");
        exit(2);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        puts("pause (metax-operator test node)");
        return 0;
    }
    handle(SIGINT, on_stop);
    handle(SIGTERM, on_stop);
    handle(SIGCHLD, on_child);
    while (!stop_requested) {
        pause();
    }
    return 0;
}
