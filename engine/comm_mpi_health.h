/* engine/comm_mpi_health.h - liveness probes beside the MPI comm (internal to engine/comm_mpi*.c).
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
 * Aborting (tri_mpi_health_before_abort): MPI_Abort on any rank ends every rank, so the first abort
 * would cut off the others' reports. A notified rank therefore acknowledges the verdict (ACK) once
 * it has reported and waits; the detector waits for the acknowledgements of the ranks it notified,
 * then releases them (DONE) and every rank aborts. Under Open MPI's recovery mode an abort ends
 * only its own rank, which is why the release is a message. Both waits are bounded, so a rank that
 * dies meanwhile delays the end by at most the wait given. */
#ifndef TRIDENT_ENGINE_COMM_MPI_HEALTH_H
#define TRIDENT_ENGINE_COMM_MPI_HEALTH_H

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
    char *notifier;         /* (size) per rank: 0, 1 it sent this one a verdict (several may detect),
                               2 that verdict is acknowledged */
    bool noticed;           /* any verdict received */
    bool aborting;          /* in tri_mpi_health_before_abort: verdicts are acknowledged on arrival */
    int notified, acks;     /* ranks this one sent its verdict to; acknowledgements received */
    bool released;          /* a detector has every acknowledgement (DONE): abort now */
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

/* Before MPI_Abort: acknowledges a received verdict to its sender; as a detector waits (answering
 * probes) until every rank it notified has acknowledged, then releases them; as a notified rank
 * waits for that release. Each wait at most wait_s; returns at once when neither applies. */
void tri_mpi_health_before_abort(tri_mpi_health *h, double wait_s);

/* World ranks of comm's members as text ("0, 2, 4" or "0-3"), at most n bytes. */
void tri_mpi_health_members(tri_mpi_health *h, MPI_Comm comm, char *buf, size_t n);

#endif
