/* MPI_IN_PLACE is a macro whose value differs between MPI libraries (Open MPI: (void *) 1,
 * MPICH: (void *) -1) and that rsmpi does not export: this hands it to Rust. */
#include <mpi.h>

void *ember_mpi_in_place(void) { return MPI_IN_PLACE; }
