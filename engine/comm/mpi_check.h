/* engine/comm/mpi_check.h - one way to check an MPI call, shared by the MPI comm and the NCCL comm's
 * MPI bootstrap. */
#ifndef TRIDENT_ENGINE_COMM_MPI_CHECK_H
#define TRIDENT_ENGINE_COMM_MPI_CHECK_H

#ifdef __cplusplus
extern "C" {
#endif

/* Records a failed MPI call (err != MPI_SUCCESS) with MPI's own message and the call's text;
 * returns TRI_ECOMM, or TRI_OK when the call succeeded. */
int tri_mpi_check(int err, const char *call, const char *file, int line);

#define TRI_MPI(call) tri_mpi_check((call), #call, __FILE__, __LINE__)

#ifdef __cplusplus
}
#endif

#endif
