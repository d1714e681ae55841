/* libdoorbell-ompi.c -- `LD_PRELOAD=libdoorbell-ompi.so mpirun ./app`
 * selects the doorbell BTL with nothing on the command line.
 *
 * A constructor sets Open MPI's selection variables, unless the user set
 * them: OMPI_MCA_btl=self,doorbell, and OMPI_MCA_pml=ob1 (BTLs run under
 * ob1 only).  Preloaded into mpirun, they reach the ranks it starts with
 * the rest of its OMPI_MCA_* environment; preloaded into a rank (mpirun
 * -x LD_PRELOAD=...), they are set before MPI_Init reads them.  Open MPI
 * then loads the component from where it looks for components (make -C
 * ompi install).  This library links neither Open MPI nor the doorbell
 * core, and exports nothing.
 */
#include <stdlib.h>

__attribute__((constructor)) static void select_doorbell(void)
{
    /* overwrite 0: what the user set wins.  A constructor runs before the
     * program starts threads, so setenv races with no getenv. */
    (void) setenv("OMPI_MCA_btl", "self,doorbell", 0);
    (void) setenv("OMPI_MCA_pml", "ob1", 0);
}
