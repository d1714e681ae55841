/* btl_doorbell_got.c -- redirect another library's calls to a libc function.
 *
 * Open MPI's libraries call libc through their PLT: `call sched_yield@plt`
 * jumps through a slot of the library's global offset table, which the
 * dynamic linker fills with libc's address.  A dlopen'ed component cannot
 * interpose the symbol (the libraries were bound before it was loaded), but
 * it can rewrite the slot: this file finds each loaded library's
 * JUMP_SLOT relocation for a symbol and stores a new target there, and
 * puts every slot back at close, before the component is unloaded.
 *
 * Debian's Open MPI is linked without BIND_NOW, so the slots are in the
 * writable .got.plt; a slot that lies in a RELRO range (a library linked
 * with -z now) is made writable for the store and read-only again after.
 */
#include "opal_config.h"

#include <elf.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "btl_doorbell_got.h"

#define MAX_SLOTS 256

typedef struct {
    void **slot;
    void *before;
} patched_slot_t;

static patched_slot_t patched[MAX_SLOTS];
static int npatched;

typedef struct {
    const mca_btl_doorbell_got_target_t *targets; /* sorted by symbol */
    size_t ntargets;
    bool (*want)(const char *path);
    int found;
} patch_request_t;

/* Orders targets for qsort and finds a relocation's name by bsearch. */
static int by_symbol(const void *a, const void *b)
{
    return strcmp(((const mca_btl_doorbell_got_target_t *) a)->symbol,
                  ((const mca_btl_doorbell_got_target_t *) b)->symbol);
}

/* glibc stores relocated addresses in most d_ptr entries of a loaded
 * object's dynamic section, but not for every object (the vDSO): an
 * address below the load base is still an offset. */
static uintptr_t dyn_addr(const struct dl_phdr_info *info, ElfW(Addr) v)
{
    return v < info->dlpi_addr ? info->dlpi_addr + v : v;
}

static bool in_relro(const struct dl_phdr_info *info, uintptr_t addr)
{
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (PT_GNU_RELRO == ph->p_type) {
            uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
            if (addr >= lo && addr < lo + ph->p_memsz) {
                return true;
            }
        }
    }
    return false;
}

/* Store `value` in `slot`; a slot under RELRO is unprotected around the
 * store.  The store is one aligned pointer write, so a thread that calls
 * through the slot at the same time jumps to the old or the new target,
 * both valid. */
static bool store_slot(const struct dl_phdr_info *info, void **slot, void *value)
{
    bool relro = in_relro(info, (uintptr_t) slot);
    long page = sysconf(_SC_PAGESIZE);
    void *base = (void *) ((uintptr_t) slot & ~((uintptr_t) page - 1));

    if (relro && 0 != mprotect(base, (size_t) page, PROT_READ | PROT_WRITE)) {
        return false;
    }
    __atomic_store_n(slot, value, __ATOMIC_RELEASE);
    if (relro) {
        (void) mprotect(base, (size_t) page, PROT_READ);
    }
    return true;
}

static int patch_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    patch_request_t *req = (patch_request_t *) arg;
    const ElfW(Dyn) *dyn = NULL;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const ElfW(Rela) *jmprel = NULL;
    size_t pltrelsz = 0;
    (void) size;

    /* the main program is named "" */
    if (NULL == info->dlpi_name || !req->want(info->dlpi_name)) {
        return 0;
    }
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        if (PT_DYNAMIC == info->dlpi_phdr[i].p_type) {
            dyn = (const ElfW(Dyn) *) (info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        }
    }
    if (NULL == dyn) {
        return 0;
    }
    for (; DT_NULL != dyn->d_tag; ++dyn) {
        switch (dyn->d_tag) {
        case DT_SYMTAB:
            symtab = (const ElfW(Sym) *) dyn_addr(info, dyn->d_un.d_ptr);
            break;
        case DT_STRTAB:
            strtab = (const char *) dyn_addr(info, dyn->d_un.d_ptr);
            break;
        case DT_JMPREL:
            jmprel = (const ElfW(Rela) *) dyn_addr(info, dyn->d_un.d_ptr);
            break;
        case DT_PLTRELSZ:
            pltrelsz = dyn->d_un.d_val;
            break;
        case DT_PLTREL:
            if (DT_RELA != dyn->d_un.d_val) {
                return 0; /* x86_64 and aarch64 use RELA; anything else: leave it */
            }
            break;
        }
    }
    if (NULL == symtab || NULL == strtab || NULL == jmprel) {
        return 0;
    }
    for (size_t i = 0; i < pltrelsz / sizeof(ElfW(Rela)); ++i) {
        const ElfW(Rela) *r = &jmprel[i];
        const mca_btl_doorbell_got_target_t name = {.symbol = strtab + symtab[ELF64_R_SYM(r->r_info)].st_name};
        const mca_btl_doorbell_got_target_t *t =
            bsearch(&name, req->targets, req->ntargets, sizeof(*t), by_symbol);
        if (NULL == t) {
            continue;
        }
        void **slot = (void **) (info->dlpi_addr + r->r_offset);
        if (*slot == t->target) {
            continue; /* already ours */
        }
        if (npatched >= MAX_SLOTS) {
            return 1;
        }
        void *before = *slot;
        if (store_slot(info, slot, t->target)) {
            patched[npatched].slot = slot;
            patched[npatched].before = before;
            ++npatched;
            ++req->found;
        }
    }
    return 0;
}

int mca_btl_doorbell_got_redirect(const char *symbol, void *target, bool (*want)(const char *path))
{
    mca_btl_doorbell_got_target_t one = {.symbol = symbol, .target = target};
    return mca_btl_doorbell_got_redirect_all(&one, 1, want);
}

int mca_btl_doorbell_got_redirect_all(mca_btl_doorbell_got_target_t *targets, size_t n,
                                      bool (*want)(const char *path))
{
    patch_request_t req = {.targets = targets, .ntargets = n, .want = want, .found = 0};
    if (0 < n) {
        qsort(targets, n, sizeof(*targets), by_symbol);
        (void) dl_iterate_phdr(patch_object, &req);
    }
    return req.found;
}

/* The slot's old content may be the lazy-binding PLT stub, which would bind
 * the symbol again when called; that is fine -- it restores libc's target. */
static int restore_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void) size;
    (void) arg;
    for (int i = 0; i < npatched; ++i) {
        uintptr_t s = (uintptr_t) patched[i].slot;
        for (int p = 0; p < info->dlpi_phnum; ++p) {
            const ElfW(Phdr) *ph = &info->dlpi_phdr[p];
            uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
            if (PT_LOAD == ph->p_type && s >= lo && s < lo + ph->p_memsz && NULL != patched[i].slot) {
                (void) store_slot(info, patched[i].slot, patched[i].before);
                patched[i].slot = NULL;
            }
        }
    }
    return 0;
}

void mca_btl_doorbell_got_restore_all(void)
{
    /* Only slots of objects still loaded are written back. */
    (void) dl_iterate_phdr(restore_object, NULL);
    npatched = 0;
}
