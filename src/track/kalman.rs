//! Constant-velocity Kalman filter on (cx, cy, aspect, h), as ByteTrack and
//! SORT use it: eight states (the four plus their velocities), noise scaled
//! by the box height, one frame per step.

// Small fixed-size matrices: index loops read like the formulas they implement.
#![allow(clippy::needless_range_loop)]

/// Position noise, per unit of box height.
const STD_POSITION: f64 = 1.0 / 20.0;
/// Velocity noise, per unit of box height.
const STD_VELOCITY: f64 = 1.0 / 160.0;

type Mat8 = [[f64; 8]; 8];
type Mat4 = [[f64; 4]; 4];

/// Mean and covariance of one track's state: cx, cy, w/h, h and their velocities.
#[derive(Debug, Clone, PartialEq)]
pub struct KalmanState {
    pub mean: [f64; 8],
    pub cov: Mat8,
}

fn diag8(d: [f64; 8]) -> Mat8 {
    let mut m = [[0.0; 8]; 8];
    for i in 0..8 {
        m[i][i] = d[i];
    }
    m
}

/// (x0, y0, x1, y1) → (cx, cy, w/h, h).
pub fn xyxy_to_xyah(b: [f32; 4]) -> [f64; 4] {
    let (w, h) = ((b[2] - b[0]) as f64, (b[3] - b[1]) as f64);
    let h = h.max(1e-6);
    [b[0] as f64 + w / 2.0, b[1] as f64 + h / 2.0, w / h, h]
}

/// (cx, cy, w/h, h) → (x0, y0, x1, y1).
pub fn xyah_to_xyxy(m: &[f64]) -> [f32; 4] {
    let (h, w) = (m[3], m[2] * m[3]);
    [(m[0] - w / 2.0) as f32, (m[1] - h / 2.0) as f32, (m[0] + w / 2.0) as f32, (m[1] + h / 2.0) as f32]
}

impl KalmanState {
    /// A new track at `z` (cx, cy, a, h), still.
    pub fn initiate(z: [f64; 4]) -> Self {
        let h = z[3];
        let (p, v) = (STD_POSITION * h, STD_VELOCITY * h);
        let std = [2.0 * p, 2.0 * p, 1e-2, 2.0 * p, 10.0 * v, 10.0 * v, 1e-5, 10.0 * v];
        KalmanState { mean: [z[0], z[1], z[2], z[3], 0.0, 0.0, 0.0, 0.0], cov: diag8(std.map(|s| s * s)) }
    }

    /// One frame ahead: x = F x, P = F P Fᵀ + Q.
    pub fn predict(&mut self) {
        let h = self.mean[3];
        let (p, v) = (STD_POSITION * h, STD_VELOCITY * h);
        let q = [p, p, 1e-2, p, v, v, 1e-5, v].map(|s| s * s);
        for i in 0..4 {
            self.mean[i] += self.mean[i + 4];
        }
        // F P Fᵀ with F = [[I, I], [0, I]]: rows then columns i += i + 4.
        let mut c = self.cov;
        for i in 0..4 {
            for j in 0..8 {
                c[i][j] += c[i + 4][j];
            }
        }
        for row in c.iter_mut() {
            for j in 0..4 {
                row[j] += row[j + 4];
            }
        }
        for i in 0..8 {
            c[i][i] += q[i];
        }
        self.cov = c;
    }

    /// Correct with the measurement `z` (cx, cy, a, h).
    pub fn update(&mut self, z: [f64; 4]) {
        let h = self.mean[3];
        let p = STD_POSITION * h;
        let r = [p, p, 1e-1, p].map(|s| s * s);
        // S = H P Hᵀ + R: the top-left 4x4 block.
        let mut s: Mat4 = [[0.0; 4]; 4];
        for i in 0..4 {
            for j in 0..4 {
                s[i][j] = self.cov[i][j];
            }
            s[i][i] += r[i];
        }
        let Some(l) = cholesky(&s) else { return };
        // K = P Hᵀ S⁻¹: each row k of P Hᵀ (P's first four columns) solved against S.
        let mut k = [[0.0; 4]; 8];
        for (i, ki) in k.iter_mut().enumerate() {
            *ki = chol_solve(&l, [self.cov[i][0], self.cov[i][1], self.cov[i][2], self.cov[i][3]]);
        }
        let innov: [f64; 4] = std::array::from_fn(|j| z[j] - self.mean[j]);
        for i in 0..8 {
            self.mean[i] += (0..4).map(|j| k[i][j] * innov[j]).sum::<f64>();
        }
        // P -= K S Kᵀ, which equals K (H P) since K S = P Hᵀ.
        let mut c = self.cov;
        for i in 0..8 {
            for j in 0..8 {
                c[i][j] -= (0..4).map(|m| k[i][m] * self.cov[m][j]).sum::<f64>();
            }
        }
        self.cov = c;
    }

    /// The box the mean describes, x0, y0, x1, y1.
    pub fn xyxy(&self) -> [f32; 4] {
        xyah_to_xyxy(&self.mean[..4])
    }
}

/// Lower-triangular L with L Lᵀ = s (`None`: not positive definite).
fn cholesky(s: &Mat4) -> Option<Mat4> {
    let mut l = [[0.0; 4]; 4];
    for i in 0..4 {
        for j in 0..=i {
            let sum: f64 = (0..j).map(|k| l[i][k] * l[j][k]).sum();
            if i == j {
                let d = s[i][i] - sum;
                if d <= 0.0 || !d.is_finite() {
                    return None;
                }
                l[i][i] = d.sqrt();
            } else {
                l[i][j] = (s[i][j] - sum) / l[j][j];
            }
        }
    }
    Some(l)
}

/// x with (L Lᵀ) x = b (S symmetric, so a row of P Hᵀ S⁻¹ is S⁻¹ applied to it).
fn chol_solve(l: &Mat4, b: [f64; 4]) -> [f64; 4] {
    let mut y = [0.0; 4];
    for i in 0..4 {
        y[i] = (b[i] - (0..i).map(|k| l[i][k] * y[k]).sum::<f64>()) / l[i][i];
    }
    let mut x = [0.0; 4];
    for i in (0..4).rev() {
        x[i] = (y[i] - (i + 1..4).map(|k| l[k][i] * x[k]).sum::<f64>()) / l[i][i];
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxes_round_trip() {
        let b = [10.0, 20.0, 50.0, 100.0];
        assert_eq!(xyah_to_xyxy(&xyxy_to_xyah(b)), b);
    }

    /// A box moving 3 px a frame: after a few updates the filter has learnt
    /// the velocity and predicts the next position within a pixel.
    #[test]
    fn learns_a_constant_velocity() {
        let at = |t: f64| [100.0 + 3.0 * t, 50.0, 0.5, 80.0];
        let mut k = KalmanState::initiate(at(0.0));
        for t in 1..30 {
            k.predict();
            k.update(at(t as f64));
        }
        k.predict();
        assert!((k.mean[0] - at(30.0)[0]).abs() < 1.0, "{:?}", k.mean);
        assert!((k.mean[4] - 3.0).abs() < 0.2, "{:?}", k.mean);
        assert!((k.mean[1] - 50.0).abs() < 0.5);
    }

    /// The update moves the mean toward the measurement, never past it, and
    /// shrinks the position variance.
    #[test]
    fn update_lands_between_prediction_and_measurement() {
        let mut k = KalmanState::initiate([0.0, 0.0, 1.0, 100.0]);
        k.predict();
        let before = k.cov[0][0];
        k.update([10.0, 0.0, 1.0, 100.0]);
        assert!(k.mean[0] > 0.0 && k.mean[0] < 10.0, "{:?}", k.mean);
        assert!(k.cov[0][0] < before);
        // Symmetric covariance.
        for i in 0..8 {
            for j in 0..8 {
                assert!((k.cov[i][j] - k.cov[j][i]).abs() < 1e-9);
            }
        }
    }
}
