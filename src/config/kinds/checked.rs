//! Value checks made while reading, so an error points at the value itself.

use serde::de::{self, Deserialize, Deserializer};

/// Most threads a source, decoder or model may ask for: far more than any
/// machine has cores, few enough that a typo cannot exhaust memory.
pub const MAX_THREADS: usize = 256;

fn too_many<E: de::Error>(n: usize) -> E {
    E::custom(format!("{n} threads is more than {MAX_THREADS} (each takes memory before doing any work)"))
}

pub fn threads<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let n = usize::deserialize(d)?;
    if n > MAX_THREADS { Err(too_many(n)) } else { Ok(n) }
}

pub fn opt_threads<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    match usize::deserialize(d)? {
        0 => Err(de::Error::custom("0 threads: at least 1 (leave the key out for the default)")),
        n if n > MAX_THREADS => Err(too_many(n)),
        n => Ok(Some(n)),
    }
}

pub fn qos<'de, D: Deserializer<'de>>(d: D) -> Result<u8, D::Error> {
    match u8::deserialize(d)? {
        q @ (0 | 1) => Ok(q),
        q => Err(de::Error::custom(format!("qos = {q}: the MQTT sink sends at QoS 0 or 1"))),
    }
}

pub fn opt_frames<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match u64::deserialize(d)? {
        0 => Err(de::Error::custom("max_frames = 0 would read no frame (leave it out to read them all)")),
        n => Ok(Some(n)),
    }
}

pub fn opt_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let s = f64::deserialize(d)?;
    if s.is_finite() && s > 0.0 {
        Ok(Some(s))
    } else {
        Err(de::Error::custom(format!("{s} seconds: a duration must be a positive number (leave it out for endless)")))
    }
}

pub fn finite3<'de, D: Deserializer<'de>>(d: D) -> Result<[f32; 3], D::Error> {
    let v = <[f32; 3]>::deserialize(d)?;
    if v.iter().all(|x| x.is_finite()) { Ok(v) } else { Err(de::Error::custom(format!("{v:?}: every value must be a finite number"))) }
}

/// `std`: divides every value, so neither 0 nor infinite nor NaN.
pub fn divisors3<'de, D: Deserializer<'de>>(d: D) -> Result<[f32; 3], D::Error> {
    let v = <[f32; 3]>::deserialize(d)?;
    if v.iter().all(|x| x.is_finite() && *x != 0.0) {
        Ok(v)
    } else {
        Err(de::Error::custom(format!("{v:?}: every value divides the pixels, so it must be a finite number other than 0")))
    }
}

pub fn providers<'de, D: Deserializer<'de>>(d: D) -> Result<toml::Spanned<Vec<super::ProviderSpec>>, D::Error> {
    let v = toml::Spanned::<Vec<super::ProviderSpec>>::deserialize(d)?;
    if v.get_ref().is_empty() {
        return Err(de::Error::custom("providers = [] leaves no execution provider to run the model (e.g. [\"cuda\", \"cpu\"])"));
    }
    Ok(v)
}

pub fn scale<'de, D: Deserializer<'de>>(d: D) -> Result<f32, D::Error> {
    let v = f32::deserialize(d)?;
    if v.is_finite() && v != 0.0 { Ok(v) } else { Err(de::Error::custom(format!("scale = {v}: a finite number other than 0"))) }
}
