//! Minimum-cost assignment between rows (tracks) and columns (detections)
//! with a cost limit: the Hungarian method (shortest augmenting paths with
//! potentials, O(n³)) on the matrix extended as `lap.lapjv(extend_cost=True,
//! cost_limit=...)` extends it, so a pair costing more than the limit is never
//! matched and leaving a row and a column unmatched costs the limit.

/// Matched `(row, column)` pairs, unmatched rows, unmatched columns.
pub type Assignment = (Vec<(usize, usize)>, Vec<usize>, Vec<usize>);

/// Assign rows to columns of `cost` (`rows` x `cols`, row-major) minimising
/// the total, pairs above `limit` left unmatched.
pub fn assign(cost: &[f64], rows: usize, cols: usize, limit: f64) -> Assignment {
    assert_eq!(cost.len(), rows * cols);
    if rows == 0 || cols == 0 {
        return (Vec::new(), (0..rows).collect(), (0..cols).collect());
    }
    // Square matrix of n = rows + cols: the real costs top-left, limit / 2 for
    // "row unmatched" (top-right) and "column unmatched" (bottom-left), 0
    // bottom-right. A pair above the limit costs more than leaving both out.
    let n = rows + cols;
    let big = limit.max(1.0) * 1e6;
    let at = |i: usize, j: usize| -> f64 {
        match (i < rows, j < cols) {
            (true, true) => {
                let c = cost[i * cols + j];
                if c.is_finite() && c <= limit { c } else { big }
            }
            (false, false) => 0.0,
            _ => limit / 2.0,
        }
    };
    let col_of_row = hungarian(n, at);
    let (mut matches, mut free_rows) = (Vec::new(), Vec::new());
    let mut col_used = vec![false; cols];
    for (i, &j) in col_of_row.iter().enumerate().take(rows) {
        if j < cols && at(i, j) <= limit {
            matches.push((i, j));
            col_used[j] = true;
        } else {
            free_rows.push(i);
        }
    }
    let free_cols = (0..cols).filter(|&j| !col_used[j]).collect();
    (matches, free_rows, free_cols)
}

/// The column of each row in a minimum-cost perfect matching of the n x n
/// matrix `c` (potentials u, v; one augmenting path per row).
fn hungarian(n: usize, c: impl Fn(usize, usize) -> f64) -> Vec<usize> {
    const NONE: usize = usize::MAX;
    // 1-based internally: index 0 is the virtual start column.
    let (mut u, mut v) = (vec![0.0f64; n + 1], vec![0.0f64; n + 1]);
    let mut row_of = vec![0usize; n + 1];
    let mut way = vec![0usize; n + 1];
    for i in 1..=n {
        row_of[0] = i;
        let mut j0 = 0;
        let mut minv = vec![f64::INFINITY; n + 1];
        let mut used = vec![false; n + 1];
        loop {
            used[j0] = true;
            let i0 = row_of[j0];
            let (mut delta, mut j1) = (f64::INFINITY, NONE);
            for j in 1..=n {
                if used[j] {
                    continue;
                }
                let cur = c(i0 - 1, j - 1) - u[i0] - v[j];
                if cur < minv[j] {
                    minv[j] = cur;
                    way[j] = j0;
                }
                if minv[j] < delta {
                    delta = minv[j];
                    j1 = j;
                }
            }
            for j in 0..=n {
                if used[j] {
                    u[row_of[j]] += delta;
                    v[j] -= delta;
                } else {
                    minv[j] -= delta;
                }
            }
            j0 = j1;
            if row_of[j0] == 0 {
                break;
            }
        }
        loop {
            let j1 = way[j0];
            row_of[j0] = row_of[j1];
            j0 = j1;
            if j0 == 0 {
                break;
            }
        }
    }
    let mut col_of_row = vec![0usize; n];
    for j in 1..=n {
        if row_of[j] > 0 {
            col_of_row[row_of[j] - 1] = j - 1;
        }
    }
    col_of_row
}

#[cfg(test)]
mod tests {
    use super::*;

    fn total(cost: &[f64], cols: usize, m: &[(usize, usize)]) -> f64 {
        m.iter().map(|&(i, j)| cost[i * cols + j]).sum()
    }

    /// Greedy would take (0, 0) at 0.1 and leave row 1 with 0.9; the optimum
    /// pairs crosswise for 0.4.
    #[test]
    fn finds_the_optimum_not_the_greedy_choice() {
        let cost = [0.1, 0.2, 0.2, 0.9];
        let (m, r, c) = assign(&cost, 2, 2, 1.0);
        assert_eq!(m, vec![(0, 1), (1, 0)]);
        assert!(r.is_empty() && c.is_empty());
        assert!((total(&cost, 2, &m) - 0.4).abs() < 1e-12);
    }

    #[test]
    fn pairs_above_the_limit_stay_unmatched() {
        let cost = [0.9, 0.3, 0.95, 0.99];
        let (m, r, c) = assign(&cost, 2, 2, 0.8);
        assert_eq!((m, r, c), (vec![(0, 1)], vec![1], vec![0]));
    }

    #[test]
    fn rectangular_and_empty() {
        let cost = [0.5, 0.1, 0.7];
        assert_eq!(assign(&cost, 1, 3, 0.8), (vec![(0, 1)], vec![], vec![0, 2]));
        assert_eq!(assign(&cost, 3, 1, 0.8), (vec![(1, 0)], vec![0, 2], vec![]));
        assert_eq!(assign(&[], 0, 2, 0.8), (vec![], vec![], vec![0, 1]));
        let inf = [f64::INFINITY, f64::NAN];
        assert_eq!(assign(&inf, 1, 2, 0.8), (vec![], vec![0], vec![0, 1]));
    }

    /// Against every permutation of small random matrices: the same minimum.
    #[test]
    fn matches_brute_force() {
        let mut seed = 12345u64;
        let mut rnd = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as f64 / (1u64 << 31) as f64
        };
        for _ in 0..200 {
            let n = 4;
            let cost: Vec<f64> = (0..n * n).map(|_| rnd()).collect();
            let (m, _, _) = assign(&cost, n, n, 10.0);
            assert_eq!(m.len(), n);
            let mut best = f64::INFINITY;
            let mut p = [0, 1, 2, 3];
            permute(&mut p, 0, &mut |p| best = best.min((0..n).map(|i| cost[i * n + p[i]]).sum()));
            assert!((total(&cost, n, &m) - best).abs() < 1e-9);
        }
    }

    fn permute(p: &mut [usize; 4], k: usize, f: &mut impl FnMut(&[usize; 4])) {
        if k == p.len() {
            return f(p);
        }
        for i in k..p.len() {
            p.swap(k, i);
            permute(p, k + 1, f);
            p.swap(k, i);
        }
    }
}
