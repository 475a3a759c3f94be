/* engine/comm/comm_mpi_health.h - liveness probes beside the MPI comm (internal to engine/comm_mpi*.c).
 *
 * A wait that outlasts the comm's timeout cannot tell from its own request which peer failed. So
 * every MPI comm made by tri_comm_mpi_create keeps a second duplicate of its communicator for three
 * small messages: PROBE ("are you alive?"), ALIVE (the answer) and NOTICE (the verdict, as text).
 * Every rank answers probes from inside its polling waits (tri_mpi_health_service). A rank whose
 * wait times out probes every other rank, waits a grace period for the answers, names the ranks
 * that did not answer (dead, stopped, or computing for longer than the grace period without
 * entering a wait) and sends the verdict to the ranks that answered; their waits then fail with it
 * at once instead of each waiting out its own timeout. Sends are non-blocking and never waited for
 * (a dead rank's messages would never complete); their buffers are freed once MPI completes them.
 *
 * Aborting: MPI_Abort on any rank ends every rank, so the first abort could cut off the reports of
 * the ranks a verdict reached. A rank that sent or received a verdict therefore lingers before its
 * abort (tri_mpi_health_in_verdict). The linger is a plain sleep, not an exchange of
 * acknowledgements: the collective that failed stays posted, its buffer may already be freed by
 * the caller, and any MPI progress after the failure could complete it into freed memory
 * (AddressSanitizer showed it while an acknowledgement protocol ran). */
#ifndef TRIDENT_ENGINE_COMM_COMM_MPI_HEALTH_H
#define TRIDENT_ENGINE_COMM_COMM_MPI_HEALTH_H

#include <mpi.h>
#include <stdbool.h>

typedef struct tri_mpi_send tri_mpi_send;

typedef struct tri_mpi_health {
    MPI_Comm comm;          /* duplicate of the world the probes travel on */
    MPI_Group group;        /* its group: translates a sub-group's ranks to world ranks */
    int rank, size;
    int round;              /* the current probe round (answers carry it) */
    bool *alive;            /* (size) answered the current round */
    tri_mpi_send *sends;    /* messages not yet completed by MPI */
    char notice[768];       /* the first verdict received from another rank ("" none) */
    bool notified;          /* this rank sent a verdict */
    bool alerted;           /* a stop signal's probe ran (tri_comm_watch.alert) */
} tri_mpi_health;

/* Duplicates comm for the probes. */
int tri_mpi_health_create(tri_mpi_health **out, MPI_Comm comm);
void tri_mpi_health_destroy(tri_mpi_health *h);

/* Answers pending probes, records answers and verdicts, frees completed sends. Cheap: one
 * MPI_Iprobe when nothing has arrived. */
void tri_mpi_health_service(tri_mpi_health *h);

/* Probes every other rank and waits up to grace_s for the answers (answering probes meanwhile);
 * h->alive[r] tells who answered. Returns the number of ranks that did not. */
int tri_mpi_health_probe(tri_mpi_health *h, double grace_s);

/* Sends the verdict text to every rank that answered the last probe. */
void tri_mpi_health_notify(tri_mpi_health *h, const char *text);

/* This rank sent or received a verdict (it lingers before aborting). */
bool tri_mpi_health_in_verdict(const tri_mpi_health *h);

/* World ranks of comm's members as text ("0, 2, 4" or "0-3"), at most n bytes. */
void tri_mpi_health_members(tri_mpi_health *h, MPI_Comm comm, char *buf, size_t n);

#endif
