//! `LD_PRELOAD=libdoorbell.so mpirun ./app` selects doorbell without touching
//! the command line: when this library is preloaded, a constructor sets the
//! Open MPI selection variables (unless the user set them), and the ranks
//! that mpirun starts inherit them.

extern "C" fn select_doorbell_when_preloaded() {
    let preloaded = std::env::var("LD_PRELOAD").is_ok_and(|v| v.contains("libdoorbell"));
    if !preloaded {
        return;
    }
    for (k, v) in [("OMPI_MCA_btl", "self,doorbell"), ("OMPI_MCA_pml", "ob1")] {
        if std::env::var_os(k).is_none() {
            // Runs in the constructor, before the program starts threads.
            std::env::set_var(k, v);
        }
    }
}

#[used]
#[link_section = ".init_array"]
static SELECT_DOORBELL: extern "C" fn() = select_doorbell_when_preloaded;
