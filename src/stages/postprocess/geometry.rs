//! Plane geometry for postprocessing: convex hulls and minimum-area rectangles.

/// A point in the plane.
pub type Pt = [f32; 2];

fn cross(o: Pt, a: Pt, b: Pt) -> f32 {
    (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])
}

/// Convex hull (Andrew's monotone chain), counter-clockwise in y-up terms,
/// without collinear points. `points` is sorted in place.
pub fn convex_hull(points: &mut [Pt]) -> Vec<Pt> {
    points.sort_by(|a, b| a[0].total_cmp(&b[0]).then(a[1].total_cmp(&b[1])));
    if points.len() < 3 {
        let mut v = points.to_vec();
        v.dedup();
        return v;
    }
    let mut hull: Vec<Pt> = Vec::with_capacity(points.len() * 2);
    for &p in points.iter() {
        while hull.len() >= 2 && cross(hull[hull.len() - 2], hull[hull.len() - 1], p) <= 0.0 {
            hull.pop();
        }
        hull.push(p);
    }
    let lower = hull.len() + 1;
    for &p in points.iter().rev().skip(1) {
        while hull.len() >= lower && cross(hull[hull.len() - 2], hull[hull.len() - 1], p) <= 0.0 {
            hull.pop();
        }
        hull.push(p);
    }
    hull.pop();
    hull
}

/// A rotated rectangle.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RotatedRect {
    pub center: Pt,
    /// Unit vector along `w`.
    pub axis: Pt,
    pub w: f32,
    pub h: f32,
}

impl RotatedRect {
    pub fn short_side(&self) -> f32 {
        self.w.min(self.h)
    }

    /// Grow by `d` on every side.
    pub fn grow(&self, d: f32) -> RotatedRect {
        RotatedRect { w: self.w + 2.0 * d, h: self.h + 2.0 * d, ..*self }
    }

    /// Corners clockwise on screen (y down), starting at the top-left one.
    pub fn corners(&self) -> [Pt; 4] {
        let [ux, uy] = self.axis;
        let (vx, vy) = (-uy, ux);
        let (hw, hh) = (self.w / 2.0, self.h / 2.0);
        let [cx, cy] = self.center;
        let mut c = [
            [cx - ux * hw - vx * hh, cy - uy * hw - vy * hh],
            [cx + ux * hw - vx * hh, cy + uy * hw - vy * hh],
            [cx + ux * hw + vx * hh, cy + uy * hw + vy * hh],
            [cx - ux * hw + vx * hh, cy - uy * hw + vy * hh],
        ];
        // Clockwise on screen means a positive shoelace sum with y pointing down.
        if shoelace(&c) < 0.0 {
            c.swap(1, 3);
        }
        let first =
            (0..4).min_by(|&a, &b| (c[a][0] + c[a][1]).total_cmp(&(c[b][0] + c[b][1])).then(c[a][0].total_cmp(&c[b][0]))).unwrap_or(0);
        c.rotate_left(first);
        c
    }
}

fn shoelace(p: &[Pt]) -> f32 {
    let n = p.len();
    (0..n).map(|i| p[i][0] * p[(i + 1) % n][1] - p[(i + 1) % n][0] * p[i][1]).sum::<f32>() / 2.0
}

/// Minimum-area enclosing rectangle of a convex hull (rotating calipers over hull edges).
pub fn min_area_rect(hull: &[Pt]) -> RotatedRect {
    match hull.len() {
        0 => {
            return RotatedRect { center: [0.0, 0.0], axis: [1.0, 0.0], w: 0.0, h: 0.0 };
        }
        1 => {
            return RotatedRect { center: hull[0], axis: [1.0, 0.0], w: 0.0, h: 0.0 };
        }
        _ => {}
    }
    let mut best: Option<(f32, RotatedRect)> = None;
    for i in 0..hull.len() {
        let a = hull[i];
        let b = hull[(i + 1) % hull.len()];
        let (dx, dy) = (b[0] - a[0], b[1] - a[1]);
        let len = (dx * dx + dy * dy).sqrt();
        if len == 0.0 {
            continue;
        }
        let u = [dx / len, dy / len];
        let v = [-u[1], u[0]];
        let (mut umin, mut umax, mut vmin, mut vmax) = (f32::MAX, f32::MIN, f32::MAX, f32::MIN);
        for p in hull {
            let pu = p[0] * u[0] + p[1] * u[1];
            let pv = p[0] * v[0] + p[1] * v[1];
            umin = umin.min(pu);
            umax = umax.max(pu);
            vmin = vmin.min(pv);
            vmax = vmax.max(pv);
        }
        let area = (umax - umin) * (vmax - vmin);
        if best.as_ref().is_none_or(|(a, _)| area < *a) {
            let (cu, cv) = ((umin + umax) / 2.0, (vmin + vmax) / 2.0);
            let center = [cu * u[0] + cv * v[0], cu * u[1] + cv * v[1]];
            best = Some((area, RotatedRect { center, axis: u, w: umax - umin, h: vmax - vmin }));
        }
    }
    let mut r = best.map(|(_, r)| r).unwrap_or(RotatedRect { center: hull[0], axis: [1.0, 0.0], w: 0.0, h: 0.0 });
    // Prefer the long side along x-ish so `w` is the text direction.
    if r.h > r.w {
        r = RotatedRect { center: r.center, axis: [-r.axis[1], r.axis[0]], w: r.h, h: r.w };
    }
    if r.axis[0] < 0.0 {
        r.axis = [-r.axis[0], -r.axis[1]];
    }
    r
}

/// Whether `p` is inside (or on) the convex polygon `poly` (either orientation).
pub fn in_convex(poly: &[Pt], p: Pt) -> bool {
    let mut sign = 0.0f32;
    for i in 0..poly.len() {
        let c = cross(poly[i], poly[(i + 1) % poly.len()], p);
        if c.abs() < 1e-6 {
            continue;
        }
        if sign == 0.0 {
            sign = c.signum();
        } else if c.signum() != sign {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hull_of_square_with_inner_points() {
        let mut pts = vec![[0.0, 0.0], [2.0, 0.0], [2.0, 2.0], [0.0, 2.0], [1.0, 1.0], [1.0, 0.0]];
        let h = convex_hull(&mut pts);
        assert_eq!(h.len(), 4);
        assert!(!h.contains(&[1.0, 1.0]) && !h.contains(&[1.0, 0.0]));
    }

    #[test]
    fn axis_aligned_rect() {
        let mut pts = vec![[10.0, 5.0], [30.0, 5.0], [30.0, 9.0], [10.0, 9.0], [20.0, 7.0]];
        let r = min_area_rect(&convex_hull(&mut pts));
        assert!((r.w - 20.0).abs() < 1e-4 && (r.h - 4.0).abs() < 1e-4, "{r:?}");
        assert!((r.center[0] - 20.0).abs() < 1e-4 && (r.center[1] - 7.0).abs() < 1e-4);
        let c = r.corners();
        assert_eq!(c[0], [10.0, 5.0]);
        assert_eq!(c[1], [30.0, 5.0]);
        assert_eq!(c[2], [30.0, 9.0]);
        assert_eq!(c[3], [10.0, 9.0]);
    }

    #[test]
    fn rotated_rect_is_found() {
        // A 10x2 rectangle rotated by 30 degrees.
        let (s, c) = (30f32.to_radians().sin(), 30f32.to_radians().cos());
        let rot = |x: f32, y: f32| [x * c - y * s + 50.0, x * s + y * c + 50.0];
        let mut pts = vec![rot(-5.0, -1.0), rot(5.0, -1.0), rot(5.0, 1.0), rot(-5.0, 1.0), rot(0.0, 0.0)];
        let r = min_area_rect(&convex_hull(&mut pts));
        assert!((r.w - 10.0).abs() < 1e-3 && (r.h - 2.0).abs() < 1e-3, "{r:?}");
        assert!((r.axis[1] / r.axis[0] - 30f32.to_radians().tan()).abs() < 1e-3);
    }

    #[test]
    fn grow_and_contains() {
        let r = RotatedRect { center: [5.0, 5.0], axis: [1.0, 0.0], w: 4.0, h: 2.0 }.grow(1.0);
        assert_eq!((r.w, r.h), (6.0, 4.0));
        let q = r.corners();
        assert!(in_convex(&q, [2.0, 3.0]));
        assert!(in_convex(&q, [5.0, 5.0]));
        assert!(!in_convex(&q, [8.5, 5.0]));
    }

    #[test]
    fn degenerate_inputs() {
        let mut one = vec![[1.0, 1.0]];
        assert_eq!(min_area_rect(&convex_hull(&mut one)).short_side(), 0.0);
        let mut line = vec![[0.0, 0.0], [4.0, 0.0], [2.0, 0.0]];
        let r = min_area_rect(&convex_hull(&mut line));
        assert_eq!(r.short_side(), 0.0);
    }
}
