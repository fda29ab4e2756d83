/*
 * metax-container-runtime: the OCI runtime the node's container runtime runs for the `metax` handler
 * (metax_core/runtime/handler.py). It stands in front of runc:
 *
 *   - `create` / `run`: if the bundle's config.json names a MetaX device (it contains
 *     "METAX_VISIBLE_DEVICES=" or "metax-tech.com/gpu=", a cheap byte search; the edit service decides
 *     exactly), send config.json to the container-edit service on its unix socket and write back the
 *     edited config.json it answers (temp file + rename), or fail the create with the service's one-line
 *     reason on stderr and in runc's JSON log (so it reaches `kubectl describe pod`).
 *   - everything else, and containers without a MetaX device: exec the real runc with the same arguments.
 *
 * The real runc: $METAX_RUNC, else the `runc=` line of <this program's path>.conf, else the first `runc` on
 * PATH that is not this program. The socket: $METAX_EDIT_SOCKET, else the `socket=` line of that file, else
 * /run/metax/container-edit.sock.
 * The message format is metax_core/runtime/edit_wire.py's. Built with `gcc -static` (no libc needed on the
 * host); no dependency but libc.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define NAME "metax-container-runtime"
#define MAGIC "metax-edit/1"
#define DEFAULT_SOCKET "/run/metax/container-edit.sock"
#define MAX_CONFIG (16u << 20)
#define TIMEOUT_SECONDS 30

static const char *log_path;   /* runc's --log */
static int log_json;           /* --log-format json */

static void json_escape(FILE *out, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c < 0x20) fprintf(out, "\\u%04x", c);
        else fputc(c, out);
    }
}

/* Say why the create fails: stderr, and runc's log file in its JSON form (the shim reads the last error). */
static int fail(const char *fmt, ...) {
    char message[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    fprintf(stderr, NAME ": %s\n", message);
    if (log_path) {
        FILE *log = fopen(log_path, "a");
        if (log) {
            if (log_json) {
                char stamp[64];
                time_t now = time(NULL);
                strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
                fprintf(log, "{\"level\":\"error\",\"msg\":\"");
                json_escape(log, message);
                fprintf(log, "\",\"time\":\"%s\"}\n", stamp);
            } else {
                fprintf(log, NAME ": %s\n", message);
            }
            fclose(log);
        }
    }
    return 1;
}

static int is_self(const char *candidate) {
    char a[PATH_MAX], b[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", a, sizeof a - 1);
    if (n < 0) return 0;
    a[n] = 0;
    if (!realpath(candidate, b)) return 0;
    return strcmp(a, b) == 0;
}

/* A `key=value` line of <this program's path>.conf (the container-runtime agent writes it), or NULL. */
static const char *conf_value(const char *key, char *buf, size_t size) {
    char self[PATH_MAX], conf[PATH_MAX + 8];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return NULL;
    self[n] = 0;
    snprintf(conf, sizeof conf, "%s.conf", self);
    FILE *f = fopen(conf, "r");
    if (!f) return NULL;
    char line[PATH_MAX];
    size_t k = strlen(key);
    const char *found = NULL;
    while (!found && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (strncmp(line, key, k) == 0 && line[k] == '=' && line[k + 1]) {
            snprintf(buf, size, "%s", line + k + 1);
            found = buf;
        }
    }
    fclose(f);
    return found;
}

static const char *find_runc(char *buf, size_t size) {
    const char *env = getenv("METAX_RUNC");
    if (env && *env) return env;
    const char *conf = conf_value("runc", buf, size);
    if (conf) return conf;
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    char *copy = strdup(path), *save = NULL;
    for (char *dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
        snprintf(buf, size, "%s/runc", dir);
        if (access(buf, X_OK) == 0 && !is_self(buf)) {
            free(copy);
            return buf;
        }
    }
    free(copy);
    return NULL;
}

/* runc's global options that take a value (runc --help). */
static int global_takes_value(const char *opt) {
    static const char *names[] = {"--log", "--log-format", "--root", "--criu", "--rootless", NULL};
    for (int i = 0; names[i]; i++)
        if (strcmp(opt, names[i]) == 0) return 1;
    return 0;
}

/* create's and run's options that take a value. */
static int create_takes_value(const char *opt) {
    static const char *names[] = {"--bundle", "-b", "--console-socket", "--pid-file", "--preserve-fds", NULL};
    for (int i = 0; names[i]; i++)
        if (strcmp(opt, names[i]) == 0) return 1;
    return 0;
}

static const char *option_value(int argc, char **argv, int *i, const char *name) {
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) == 0 && argv[*i][n] == '=') return argv[*i] + n + 1;
    if (strcmp(argv[*i], name) == 0 && *i + 1 < argc) return argv[++*i];
    return NULL;
}

static char *read_file(const char *path, size_t *size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_size < 0 || (size_t)st.st_size > MAX_CONFIG) {
        close(fd);
        errno = EFBIG;
        return NULL;
    }
    char *data = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (data && got < (size_t)st.st_size) {
        ssize_t r = read(fd, data + got, (size_t)st.st_size - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (!data) return NULL;
    data[got] = 0;
    *size = got;
    return data;
}

static int write_all(int fd, const char *data, size_t size) {
    while (size) {
        ssize_t w = write(fd, data, size);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        data += w;
        size -= (size_t)w;
    }
    return 0;
}

static int line_ok(const char *s) { return s && *s && !strchr(s, '\n'); }

/* Ask the edit service; 0: go on with runc, 1: the create fails (already said why). */
static int edit(const char *id, const char *bundle, const char *root) {
    char config_path[PATH_MAX];
    snprintf(config_path, sizeof config_path, "%s/config.json", bundle);
    size_t size = 0;
    char *config = read_file(config_path, &size);
    if (!config) return fail("container %s: cannot read %s: %s", id, config_path, strerror(errno));
    if (!memmem(config, size, "\"METAX_VISIBLE_DEVICES=", 23) && !memmem(config, size, "metax-tech.com/gpu=", 19)) {
        free(config);
        return 0; /* not a MetaX container: runc as it is, no socket call */
    }
    if (!line_ok(id) || !line_ok(bundle) || (root && !line_ok(root)))
        return fail("container %s: id, bundle and root must be single lines", id);
    char socket_buf[PATH_MAX];
    const char *path = getenv("METAX_EDIT_SOCKET");
    if (!path || !*path) path = conf_value("socket", socket_buf, sizeof socket_buf);
    if (!path) path = DEFAULT_SOCKET;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path) return fail("socket path %s is too long", path);
    strcpy(addr.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct timeval tv = {.tv_sec = TIMEOUT_SECONDS};
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0)
        return fail("container %s asks for a MetaX GPU, but the MetaX container-edit service at %s cannot be "
                    "reached (%s): is the operator's maca pod running on this node?",
                    id, path, strerror(errno));
    char header[PATH_MAX * 3];
    int n = snprintf(header, sizeof header, MAGIC "\nid %s\nbundle %s\nroot %s\nlength %zu\n\n", id, bundle,
                     root ? root : "-", size);
    if (n < 0 || (size_t)n >= sizeof header) return fail("container %s: request header too long", id);
    if (write_all(fd, header, (size_t)n) < 0 || write_all(fd, config, size) < 0)
        return fail("container %s: cannot send config.json to %s: %s", id, path, strerror(errno));
    free(config);
    shutdown(fd, SHUT_WR);
    /* The response: "metax-edit/1 <status> <length>\n" then <length> bytes. */
    size_t cap = 65536, got = 0;
    char *resp = malloc(cap);
    for (;;) {
        if (got == cap) {
            if (cap > MAX_CONFIG + 4096) return fail("container %s: the edit service's answer is too long", id);
            cap *= 2;
            resp = realloc(resp, cap);
        }
        ssize_t r = read(fd, resp + got, cap - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            return fail("container %s: no answer from the container-edit service at %s: %s", id, path,
                        strerror(errno));
        if (r == 0) break;
        got += (size_t)r;
    }
    close(fd);
    char *nl = memchr(resp, '\n', got);
    char status[32];
    size_t length = 0;
    if (!nl || sscanf(resp, MAGIC " %31s %zu", status, &length) != 2 || length != got - (size_t)(nl + 1 - resp))
        return fail("container %s: the container-edit service at %s answered something unreadable", id, path);
    char *body = nl + 1;
    if (strcmp(status, "unchanged") == 0) return 0;
    if (strcmp(status, "refused") == 0) {
        body[length] = 0;
        return fail("container %s: %s", id, body);
    }
    if (strcmp(status, "edited") != 0) return fail("container %s: unknown answer %s from %s", id, status, path);
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/.config.json.metax-XXXXXX", bundle);
    int out = mkstemp(tmp);
    if (out < 0) return fail("container %s: cannot write the edited config.json in %s: %s", id, bundle, strerror(errno));
    /* No fsync: the bundle is the runtime's (containerd: under /run), and a crash ends this container anyway. */
    if (write_all(out, body, length) < 0 || fchmod(out, 0644) < 0 || close(out) < 0 ||
        rename(tmp, config_path) < 0) {
        int e = errno;
        unlink(tmp);
        return fail("container %s: cannot write the edited %s: %s", id, config_path, strerror(e));
    }
    free(resp);
    return 0;
}

int main(int argc, char **argv) {
    const char *root = NULL;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *v;
        if ((v = option_value(argc, argv, &i, "--root"))) root = v;
        else if ((v = option_value(argc, argv, &i, "--log"))) log_path = v;
        else if ((v = option_value(argc, argv, &i, "--log-format"))) log_json = strcmp(v, "json") == 0;
        else if (global_takes_value(argv[i]) && !strchr(argv[i], '=')) i++;
    }
    if (i < argc && (strcmp(argv[i], "create") == 0 || strcmp(argv[i], "run") == 0)) {
        const char *bundle = NULL, *id = NULL;
        for (int j = i + 1; j < argc; j++) {
            const char *v;
            if (argv[j][0] != '-') {
                if (!id) id = argv[j];
                continue;
            }
            if ((v = option_value(argc, argv, &j, "--bundle")) || (v = option_value(argc, argv, &j, "-b")))
                bundle = v;
            else if (create_takes_value(argv[j]) && !strchr(argv[j], '='))
                j++;
        }
        char cwd[PATH_MAX];
        if (!bundle) bundle = getcwd(cwd, sizeof cwd);
        if (id && bundle && edit(id, bundle, root) != 0) return 1;
    }
    char buf[PATH_MAX];
    const char *runc = find_runc(buf, sizeof buf);
    if (!runc) return fail("no runc found: set METAX_RUNC, a runc= line in the wrapper's .conf, or PATH");
    argv[0] = (char *)runc;
    execv(runc, argv);
    return fail("cannot run %s: %s", runc, strerror(errno));
}
