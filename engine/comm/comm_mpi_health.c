/* engine/comm/comm_mpi_health.c - liveness probes beside the MPI comm: who failed, when a wait times out
 * (see comm_mpi_health.h for the protocol). */
#include "engine/comm/comm_mpi_health.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/core/clock.h"
#include "engine/core/status.h"

enum { TAG_PROBE = 1, TAG_ALIVE = 2, TAG_NOTICE = 3 };

#define NOTICE_BYTES 768

/* A message in flight: its request and buffer, freed when MPI completes it. */
struct tri_mpi_send {
    MPI_Request req;
    tri_mpi_send *next;
    char buf[];
};

int tri_mpi_health_create(tri_mpi_health **out, MPI_Comm comm)
{
    tri_mpi_health *h = calloc(1, sizeof *h);
    if (!h)
        return TRI_ERR(TRI_ENOMEM, "mpi health: out of memory");
    int err = MPI_Comm_dup(comm, &h->comm);
    if (err == MPI_SUCCESS) {
        MPI_Comm_set_errhandler(h->comm, MPI_ERRORS_RETURN);
        MPI_Comm_rank(h->comm, &h->rank);
        MPI_Comm_size(h->comm, &h->size);
        MPI_Comm_group(h->comm, &h->group);
        h->alive = calloc((size_t)h->size, sizeof *h->alive);
    }
    if (err != MPI_SUCCESS || !h->alive) {
        if (err == MPI_SUCCESS) {
            MPI_Group_free(&h->group);
            MPI_Comm_free(&h->comm);
        }
        free(h);
        return TRI_ERR(err == MPI_SUCCESS ? TRI_ENOMEM : TRI_ECOMM, "mpi health: cannot duplicate the world "
                       "communicator for liveness probes");
    }
    *out = h;
    return TRI_OK;
}

/* Frees the sends MPI has completed; with `all`, cancels and drops the rest (at teardown). */
static void reap(tri_mpi_health *h, bool all)
{
    tri_mpi_send **p = &h->sends;
    while (*p) {
        tri_mpi_send *s = *p;
        int done = 0;
        MPI_Test(&s->req, &done, MPI_STATUS_IGNORE);
        if (!done && all) {
            MPI_Cancel(&s->req);
            MPI_Request_free(&s->req);
            done = 1;
        }
        if (done) {
            *p = s->next;
            free(s);
        } else {
            p = &s->next;
        }
    }
}

void tri_mpi_health_destroy(tri_mpi_health *h)
{
    if (!h)
        return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
        reap(h, true);
        MPI_Group_free(&h->group);
        MPI_Comm_free(&h->comm);
    }
    free(h->alive);
    free(h);
}

/* Starts sending `bytes` of data to rank `to` with `tag`; silently dropped if MPI refuses. */
static void send(tri_mpi_health *h, int to, int tag, const void *data, int bytes)
{
    tri_mpi_send *s = malloc(sizeof *s + (size_t)bytes);
    if (!s)
        return;
    memcpy(s->buf, data, (size_t)bytes);
    if (MPI_Isend(s->buf, bytes, MPI_BYTE, to, tag, h->comm, &s->req) != MPI_SUCCESS) {
        free(s);
        return;
    }
    s->next = h->sends;
    h->sends = s;
}

void tri_mpi_health_service(tri_mpi_health *h)
{
    for (;;) {
        int flag = 0, bytes = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, h->comm, &flag, &st) != MPI_SUCCESS || !flag)
            break;
        char buf[NOTICE_BYTES];
        MPI_Get_count(&st, MPI_BYTE, &bytes);
        if (bytes < 0 || bytes > NOTICE_BYTES)
            bytes = NOTICE_BYTES; /* MPI_Recv then reports the truncation; the message is dropped */
        memset(buf, 0, sizeof buf);
        if (MPI_Recv(buf, bytes, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, h->comm, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            continue;
        int32_t round = 0;
        memcpy(&round, buf, sizeof round);
        if (st.MPI_TAG == TAG_PROBE) {
            send(h, st.MPI_SOURCE, TAG_ALIVE, &round, (int)sizeof round);
        } else if (st.MPI_TAG == TAG_ALIVE) {
            if (round == h->round && st.MPI_SOURCE >= 0 && st.MPI_SOURCE < h->size)
                h->alive[st.MPI_SOURCE] = true;
        } else if (st.MPI_TAG == TAG_NOTICE && !h->notice[0]) {
            buf[NOTICE_BYTES - 1] = '\0';
            snprintf(h->notice, sizeof h->notice, "%s", buf[0] ? buf : "a peer reported a failure");
        }
    }
    reap(h, false);
}

int tri_mpi_health_probe(tri_mpi_health *h, double grace_s)
{
    int32_t round = ++h->round;
    for (int r = 0; r < h->size; r++) {
        h->alive[r] = r == h->rank;
        if (r != h->rank)
            send(h, r, TAG_PROBE, &round, (int)sizeof round);
    }
    double start = tri_now_s();
    int missing = h->size - 1;
    while (missing > 0 && tri_now_s() - start < grace_s) {
        struct timespec ts = {0, 1000000L}; /* 1 ms */
        nanosleep(&ts, NULL);
        tri_mpi_health_service(h);
        missing = 0;
        for (int r = 0; r < h->size; r++)
            missing += !h->alive[r];
    }
    return missing;
}

void tri_mpi_health_notify(tri_mpi_health *h, const char *text)
{
    int bytes = (int)strlen(text) + 1;
    if (bytes > NOTICE_BYTES)
        bytes = NOTICE_BYTES;
    char buf[NOTICE_BYTES];
    memcpy(buf, text, (size_t)bytes);
    buf[bytes - 1] = '\0';
    for (int r = 0; r < h->size; r++)
        if (r != h->rank && h->alive[r])
            send(h, r, TAG_NOTICE, buf, bytes);
    h->notified = true;
}

bool tri_mpi_health_in_verdict(const tri_mpi_health *h)
{
    return h->notified || h->notice[0];
}

void tri_mpi_health_members(tri_mpi_health *h, MPI_Comm comm, char *buf, size_t n)
{
    int size = 0;
    MPI_Group g;
    buf[0] = '\0';
    if (MPI_Comm_size(comm, &size) != MPI_SUCCESS || MPI_Comm_group(comm, &g) != MPI_SUCCESS)
        return;
    int *in = malloc((size_t)size * sizeof *in), *world = malloc((size_t)size * sizeof *world);
    if (in && world) {
        for (int i = 0; i < size; i++)
            in[i] = i;
        if (MPI_Group_translate_ranks(g, size, in, h->group, world) == MPI_SUCCESS) {
            size_t used = 0;
            for (int i = 0; i < size && used < n; i++) {
                int j = i; /* a run of consecutive ranks prints as a range */
                while (j + 1 < size && world[j + 1] == world[j] + 1)
                    j++;
                int w = j - i >= 2 ? snprintf(buf + used, n - used, "%s%d-%d", i ? ", " : "", world[i], world[j])
                                   : snprintf(buf + used, n - used, "%s%d", i ? ", " : "", world[i]);
                if (j - i == 1 && w > 0 && used + (size_t)w < n)
                    w += snprintf(buf + used + (size_t)w, n - used - (size_t)w, ", %d", world[j]);
                used += w > 0 ? (size_t)w : 0;
                i = j;
            }
        }
    }
    free(in);
    free(world);
    MPI_Group_free(&g);
}
