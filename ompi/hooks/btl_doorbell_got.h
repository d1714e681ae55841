/* btl_doorbell_got.h -- redirect Open MPI's PLT calls to a libc function
 * (see btl_doorbell_got.c). */
#ifndef MCA_BTL_DOORBELL_GOT_H
#define MCA_BTL_DOORBELL_GOT_H

#include <stdbool.h>
#include <stddef.h>

/* Point every JUMP_SLOT for `symbol` in each loaded object whose path
 * `want` accepts at `target`.  Returns the number of slots changed (slots
 * that already hold `target` are skipped, so calling it again after more
 * libraries were loaded is safe). */
int mca_btl_doorbell_got_redirect(const char *symbol, void *target, bool (*want)(const char *path));

typedef struct {
    const char *symbol;
    void *target;
} mca_btl_doorbell_got_target_t;

/* The same for `n` symbols at once (`targets` is sorted in place): one
 * walk over the loaded objects and their relocations, where a call per
 * symbol walked them all again (the blocking calls' ~100 symbols took 4-5
 * ms of each rank's start-up). */
int mca_btl_doorbell_got_redirect_all(mca_btl_doorbell_got_target_t *targets, size_t n,
                                      bool (*want)(const char *path));

/* Put back what every redirected slot held before.  Call before the
 * component can be unloaded. */
void mca_btl_doorbell_got_restore_all(void);

#endif
