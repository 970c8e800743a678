//! Statistics shared by the queue (adaptive repeats) and the reports.

/// Half-width of the 95% CI of the mean (t-distribution).
pub fn ci95_half_width(xs: &[f64]) -> f64 {
    let n = xs.len();
    if n < 2 {
        return f64::INFINITY;
    }
    let mean = xs.iter().sum::<f64>() / n as f64;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    t95(n - 1) * (var / n as f64).sqrt()
}

/// Two-sided 95% Student t quantile for `df` degrees of freedom.
pub fn t95(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        d if d <= 30 => T[d - 1],
        d if d <= 60 => 2.000 + (2.042 - 2.000) * (60 - d) as f64 / 30.0,
        d if d <= 120 => 1.980 + (2.000 - 1.980) * (120 - d) as f64 / 60.0,
        _ => 1.960,
    }
}
