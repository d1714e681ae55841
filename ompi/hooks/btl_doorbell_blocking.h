/* btl_doorbell_blocking.h -- which MPI calls may sleep (see
 * btl_doorbell_blocking.c). */
#ifndef MCA_BTL_DOORBELL_BLOCKING_H
#define MCA_BTL_DOORBELL_BLOCKING_H

#include <stdbool.h>
#include <stdint.h>

/* Wrap the program's blocking MPI calls; false if none could be seen. */
bool mca_btl_doorbell_blocking_install(void);
/* true if the program's blocking calls are marked */
bool mca_btl_doorbell_blocking_marked(void);
/* How many PLT slots of the program and its libraries the wrappers took. */
int mca_btl_doorbell_blocking_slots(void);
/* This thread: how deep in blocking MPI calls, and the number of its
 * current (or last) outermost one. */
void mca_btl_doorbell_blocking_state(unsigned int *depth, uint64_t *serial);

#endif
