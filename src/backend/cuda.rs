//! CUDA through cudarc (dynamic loading): the device-memory side of frames.
//! Only probing lives here so far; decode, kernels and bound inference
//! arrive with the GPU path.

/// Device-resident image planes. `keep` owns whatever keeps the memory alive
/// (an AVFrame, a pooled device buffer…); dropping it releases the planes.
pub struct DeviceImage {
    /// Device pointers per plane (0 when unused).
    pub planes: [u64; 4],
    pub pitches: [usize; 4],
    pub keep: Box<dyn std::any::Any + Send + Sync>,
}

/// What this machine offers to the GPU path.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CudaProbe {
    pub driver: bool,
    pub nvrtc: bool,
    pub devices: usize,
}

/// Probe without panicking: cudarc's loader panics when a library is missing,
/// so presence is checked first.
pub fn probe() -> CudaProbe {
    // SAFETY: only tries to dlopen the driver library; no CUDA call is made.
    let driver = unsafe { cudarc::driver::sys::is_culib_present() };
    // SAFETY: as above, for libnvrtc.
    let nvrtc = unsafe { cudarc::nvrtc::sys::is_culib_present() };
    let devices = if driver { cudarc::driver::CudaContext::device_count().unwrap_or(0).max(0) as usize } else { 0 };
    CudaProbe { driver, nvrtc, devices }
}

#[cfg(test)]
mod tests {
    #[test]
    fn probe_never_panics() {
        let p = super::probe();
        if !p.driver {
            eprintln!("no CUDA driver here: GPU checks are skipped");
            assert_eq!(p.devices, 0);
        }
    }
}
