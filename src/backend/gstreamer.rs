//! GStreamer (second decode backend). Initialisation and probing so far;
//! the appsink source arrives with the media I/O work.

/// Initialise GStreamer and report its version.
pub fn version() -> Result<String, String> {
    gstreamer::init().map_err(|e| e.to_string())?;
    Ok(gstreamer::version_string().to_string())
}

/// Whether GStreamer's NVIDIA codec elements (nvcodec plugin) are installed.
pub fn has_nvcodec() -> bool {
    version().is_ok() && gstreamer::ElementFactory::find("nvh264dec").is_some()
}

#[cfg(test)]
mod tests {
    #[test]
    fn initialises() {
        let v = super::version().expect("GStreamer initialises");
        assert!(v.starts_with("GStreamer "), "{v}");
    }
}
