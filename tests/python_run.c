/* tests/python_run.c - how the tests run a reference script (PyTorch, numpy, h5py; see testutil.h).
 *
 * Through the suite's Python server when there is one (tests/python_server.py, the CTest fixture
 * trident_python: the libraries imported once, a fork per script; importing torch costs a fresh
 * python3 1.4 CPU-s and ~33,000 page faults), else with /usr/bin/python3 itself: a suite run by hand,
 * outside CTest, needs no server. Either way the script gets the same arguments, working directory,
 * stdout and stderr, and its exit status is the answer. The shell tests reach the server through
 * tests/python_client.c. */
#include "tests/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* Appends s and its terminating NUL to msg (cap bytes, *len used); false when it does not fit. */
static bool put_field(char *msg, size_t cap, size_t *len, const char *s)
{
    size_t n = strlen(s) + 1;
    if (*len + n > cap)
        return false;
    memcpy(msg + *len, s, n);
    *len += n;
    return true;
}

/* A connected socket to the server at path, or -1 when none listens there. */
static int server_connect(const char *path)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path)
        return -1;
    memcpy(addr.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Sends the request msg (len bytes) with this process's stdout and stderr attached (SCM_RIGHTS);
 * returns whether the whole message went. */
static bool send_with_output(int fd, char *msg, size_t len)
{
    struct iovec iov = {.iov_base = msg, .iov_len = len};
    union {
        struct cmsghdr h;
        char space[CMSG_SPACE(2 * sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.space, .msg_controllen = sizeof ctl.space};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(2 * sizeof(int));
    const int out_err[2] = {1, 2};
    memcpy(CMSG_DATA(c), out_err, sizeof out_err);
    fflush(stdout);
    fflush(stderr);
    return sendmsg(fd, &mh, 0) == (ssize_t)len;
}

int tu_python_server_run(const char *script, const char *const *args, int n)
{
    const char *path = getenv("TRIDENT_PYTHON_SERVER");
    int fd = path && *path ? server_connect(path) : -1;
    if (fd < 0)
        return TU_NO_PYTHON_SERVER;
    static _Thread_local char msg[1 << 15];
    char cwd[4096], reply[16];
    size_t len = 0;
    bool fits = getcwd(cwd, sizeof cwd) != NULL && put_field(msg, sizeof msg, &len, "run") &&
                put_field(msg, sizeof msg, &len, cwd) && put_field(msg, sizeof msg, &len, script);
    for (int i = 0; i < n && fits; i++)
        fits = put_field(msg, sizeof msg, &len, args[i]);
    /* the fields are NUL-separated: the last one's terminator is not sent */
    ssize_t got = fits && send_with_output(fd, msg, len - 1) ? recv(fd, reply, sizeof reply - 1, 0) : -1;
    close(fd);
    if (got <= 0)
        return -1;
    reply[got] = '\0';
    return atoi(reply);
}

int tu_torch_run(const char *script, const char *const *args, int n, char *cmd, size_t cmd_len)
{
    const char *path = tu_source_path(script);
    int used = snprintf(cmd, cmd_len, "/usr/bin/python3 '%s'", path);
    for (int i = 0; i < n && used >= 0 && (size_t)used < cmd_len; i++)
        used += snprintf(cmd + used, cmd_len - (size_t)used, " '%s'", args[i]);
    if (used < 0 || (size_t)used >= cmd_len)
        return -1;
    int rc = tu_python_server_run(path, args, n);
    return rc == TU_NO_PYTHON_SERVER ? tu_run(cmd) : rc;
}

int tu_torch_jobs(const char *script, const tu_torch_job *jobs, int n, char *cmd, size_t cmd_len)
{
    const char **args = malloc(sizeof *args * 3 * (size_t)(n > 0 ? n : 1));
    if (!args)
        return -1;
    for (int i = 0; i < n; i++) {
        args[3 * i] = jobs[i].model;
        args[3 * i + 1] = jobs[i].in;
        args[3 * i + 2] = jobs[i].out;
    }
    int rc = tu_torch_run(script, args, 3 * n, cmd, cmd_len);
    free(args);
    return rc;
}

bool tu_have_torch(void)
{
    return tu_run("/usr/bin/python3 -c 'import importlib.util, sys; "
                  "sys.exit(importlib.util.find_spec(\"torch\") is None)' >/dev/null 2>&1") == 0;
}
