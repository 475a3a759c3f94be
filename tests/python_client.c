/* tests/python_client.c - `python_client SCRIPT ARGS...`, the shell tests' python3 under CTest (their
 * $py, from TRIDENT_PYTHON): runs SCRIPT on the suite's Python server (tests/python_server.py: a fork
 * of a python3 that imported torch, numpy and h5py once, which a fresh python3 pays 0.24-1.4 CPU-s
 * for) and exits with its status. Anything else (python3's options such as -c or -, or no server
 * listening) is /usr/bin/python3 itself, executed with the same arguments. */
#include <stdio.h>
#include <unistd.h>

#include "tests/testutil.h"

int main(int argc, char **argv)
{
    if (argc >= 2 && argv[1][0] != '-') {
        int rc = tu_python_server_run(argv[1], (const char *const *)argv + 2, argc - 2);
        if (rc != TU_NO_PYTHON_SERVER)
            return rc < 0 ? 1 : rc;
    }
    static char python[] = "/usr/bin/python3";
    argv[0] = python;
    execv(python, argv);
    perror("python_client: /usr/bin/python3");
    return 127;
}
