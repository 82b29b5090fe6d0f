//! Multi-object tracking, ByteTrack's way: a Kalman motion model per track,
//! two-stage association (confident detections first, then weak ones
//! against the tracks still unmatched), a buffer that keeps lost tracks
//! alive for a while, and a number of hits before a track is confirmed.
//! Owns the algorithm only; the `track` stage (src/stages/track.rs) applies
//! it per stream to the boxes a detection stage attached.

pub mod assign;
pub mod kalman;

use kalman::{KalmanState, xyxy_to_xyah};

/// Tracker parameters (supervision's `ByteTrack` names and defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// Detections scoring above this take part in the first association;
    /// a new track starts from one scoring at least this + 0.1.
    pub track_activation_threshold: f32,
    /// Frames (at 30 fps; scaled by `frame_rate`) a lost track is kept.
    pub lost_track_buffer: u32,
    /// First association: pairs are matched when 1 - IoU·score is at most this.
    pub minimum_matching_threshold: f32,
    pub frame_rate: f64,
    /// Consecutive hits before a track is confirmed and given its id.
    pub minimum_consecutive_frames: u32,
    /// Weak detections scoring at most this are ignored.
    pub low_threshold: f32,
    /// Second association (weak detections): at most this 1 - IoU.
    pub second_matching_threshold: f32,
    /// Tentative tracks against the remaining confident detections: at most this 1 - IoU·score.
    pub tentative_matching_threshold: f32,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            track_activation_threshold: 0.25,
            lost_track_buffer: 30,
            minimum_matching_threshold: 0.8,
            frame_rate: 30.0,
            minimum_consecutive_frames: 1,
            low_threshold: 0.1,
            second_matching_threshold: 0.5,
            tentative_matching_threshold: 0.7,
        }
    }
}

impl Params {
    /// Frames a lost track survives: `lost_track_buffer` scaled from 30 fps to `frame_rate`.
    pub fn max_time_lost(&self) -> u64 {
        (self.frame_rate / 30.0 * self.lost_track_buffer as f64) as u64
    }
}

/// One detection in: box (x0, y0, x1, y1), score, class.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Detection {
    pub bbox: [f32; 4],
    pub score: f32,
    pub class: u32,
}

/// Where a track stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TrackState {
    /// Seen, not yet for `minimum_consecutive_frames` frames: no id yet.
    Tentative,
    /// Matched in this frame, with an id.
    Confirmed,
    /// Not matched in this frame; kept for the lost-track buffer.
    Lost,
}

/// A track as reported for one frame.
#[derive(Debug, Clone, PartialEq)]
pub struct TrackedBox {
    /// `None` while tentative.
    pub track_id: Option<u64>,
    pub state: TrackState,
    pub class: u32,
    /// The detection matched in this frame (`None` for a lost track).
    pub detection: Option<usize>,
    /// The Kalman box: after this frame's correction, or predicted when lost.
    pub smoothed: [f32; 4],
    /// Score of the last matched detection.
    pub score: f32,
    /// Frames since the track started.
    pub age: u64,
    /// Frames it was matched in.
    pub hits: u64,
}

/// A confirmed track that ended (lost longer than the buffer).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EndedTrack {
    pub track_id: u64,
    pub class: u32,
    /// Frame numbers (`seq`) of its first and last match.
    pub first_seq: u64,
    pub last_seq: u64,
    /// Frames it was matched in.
    pub hits: u64,
}

/// What one frame's update gives.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Update {
    /// Live tracks: matched ones (tentative or confirmed), then lost confirmed ones.
    pub tracks: Vec<TrackedBox>,
    pub ended: Vec<EndedTrack>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Tracked,
    Lost,
}

#[derive(Debug, Clone)]
struct Track {
    kf: KalmanState,
    phase: Phase,
    /// ByteTrack's `is_activated`: matched on a later frame than its first
    /// (or started on the stream's first frame).
    activated: bool,
    id: Option<u64>,
    class: u32,
    score: f32,
    /// Consecutive matches since (re)activation.
    streak: u32,
    start_frame: u64,
    end_frame: u64,
    /// The caller's frame numbers of the first and the last match.
    first_seq: u64,
    last_seq: u64,
    hits: u64,
    /// Detection index matched in the current frame.
    det: Option<usize>,
    /// The last two detected boxes with their frames (newest first), for
    /// extrapolating boxes on frames the detector skipped.
    seen: [Option<(u64, [f32; 4])>; 2],
}

impl Track {
    /// The box at `frame` on a frame without detections: the last two
    /// detections extrapolated at constant velocity (corners move linearly,
    /// so an object sliding into the picture grows as it does), or the
    /// motion model's box when there is one detection only.
    fn extrapolated(&self, frame: u64) -> [f32; 4] {
        match self.seen {
            [Some((f1, b1)), Some((f0, b0))] if f1 > f0 && frame >= f1 => {
                let k = (frame - f1) as f32 / (f1 - f0) as f32;
                std::array::from_fn(|i| b1[i] + (b1[i] - b0[i]) * k)
            }
            _ => self.kf.xyxy(),
        }
    }
}

/// One stream's tracks.
#[derive(Debug, Clone)]
pub struct ByteTracker {
    params: Params,
    frame: u64,
    next_id: u64,
    /// The caller's number of the frame being updated.
    seq: u64,
    tracked: Vec<Track>,
    lost: Vec<Track>,
}

/// IoU of two x0, y0, x1, y1 boxes.
pub fn iou(a: [f32; 4], b: [f32; 4]) -> f64 {
    let (ix, iy) = ((a[2].min(b[2]) - a[0].max(b[0])).max(0.0), (a[3].min(b[3]) - a[1].max(b[1])).max(0.0));
    let inter = (ix * iy) as f64;
    let area = |r: [f32; 4]| ((r[2] - r[0]).max(0.0) * (r[3] - r[1]).max(0.0)) as f64;
    let union = area(a) + area(b) - inter;
    if union > 0.0 { inter / union } else { 0.0 }
}

impl ByteTracker {
    pub fn new(params: Params) -> Self {
        ByteTracker { params, frame: 0, next_id: 1, seq: 0, tracked: Vec::new(), lost: Vec::new() }
    }

    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Costs (1 - IoU, times the score when `fuse`) of `tracks` x `dets`;
    /// pairs of different classes cost infinity.
    fn costs(tracks: &[&Track], dets: &[(usize, Detection)], fuse: bool) -> Vec<f64> {
        let mut c = Vec::with_capacity(tracks.len() * dets.len());
        for t in tracks {
            let tb = t.kf.xyxy();
            for (_, d) in dets {
                c.push(if d.class != t.class {
                    f64::INFINITY
                } else {
                    let sim = iou(tb, d.bbox);
                    1.0 - if fuse { sim * d.score as f64 } else { sim }
                });
            }
        }
        c
    }

    fn matched(&mut self, t: &mut Track, d: (usize, Detection)) {
        t.kf.update(xyxy_to_xyah(d.1.bbox));
        if t.phase == Phase::Lost {
            t.streak = 0;
        }
        t.phase = Phase::Tracked;
        t.activated = true;
        t.score = d.1.score;
        t.streak += 1;
        t.hits += 1;
        t.end_frame = self.frame;
        t.last_seq = self.seq;
        t.det = Some(d.0);
        t.seen = [Some((self.frame, d.1.bbox)), t.seen[0]];
        self.maybe_confirm(t);
    }

    fn maybe_confirm(&mut self, t: &mut Track) {
        if t.id.is_none() && t.activated && t.streak >= self.params.minimum_consecutive_frames.max(1) {
            t.id = Some(self.next_id);
            self.next_id += 1;
        }
    }

    /// Frame `seq` was not looked at (the detector skipped it): every track
    /// moves by its motion model and keeps its state; no track starts, none
    /// is matched. Lost tracks past the buffer end, as in [`Self::update`].
    /// The boxes reported are the last two detections extrapolated (the
    /// Kalman filter, updated on one frame in several, lags behind an object
    /// that grows as it slides into the picture); the filter still predicts
    /// for the next association.
    pub fn predict(&mut self, seq: u64) -> Update {
        self.frame += 1;
        self.seq = seq;
        let frame = self.frame;
        for t in &mut self.lost {
            t.kf.mean[7] = 0.0;
        }
        for t in self.tracked.iter_mut().chain(&mut self.lost) {
            t.kf.predict();
            t.det = None;
        }
        let max_lost = self.params.max_time_lost();
        let mut ended = Vec::new();
        self.lost.retain(|t| {
            let keep = frame - t.end_frame <= max_lost;
            if !keep && let Some(id) = t.id {
                ended.push(EndedTrack { track_id: id, class: t.class, first_seq: t.first_seq, last_seq: t.last_seq, hits: t.hits });
            }
            keep
        });
        let report = |t: &Track, state: TrackState| TrackedBox {
            track_id: t.id,
            state,
            class: t.class,
            detection: None,
            smoothed: if state == TrackState::Lost { t.kf.xyxy() } else { t.extrapolated(frame) },
            score: t.score,
            age: frame - t.start_frame + 1,
            hits: t.hits,
        };
        let mut tracks: Vec<TrackedBox> =
            self.tracked.iter().map(|t| report(t, if t.id.is_some() { TrackState::Confirmed } else { TrackState::Tentative })).collect();
        tracks.extend(self.lost.iter().filter(|t| t.id.is_some()).map(|t| report(t, TrackState::Lost)));
        Update { tracks, ended }
    }

    /// Take the detections of frame `seq` (the caller's numbering, reported
    /// in ended tracks; the buffer counts updates).
    pub fn update(&mut self, dets: &[Detection], seq: u64) -> Update {
        self.frame += 1;
        self.seq = seq;
        let p = self.params.clone();
        let high: Vec<(usize, Detection)> =
            dets.iter().copied().enumerate().filter(|(_, d)| d.score > p.track_activation_threshold).collect();
        let low: Vec<(usize, Detection)> =
            dets.iter().copied().enumerate().filter(|(_, d)| d.score > p.low_threshold && d.score < p.track_activation_threshold).collect();

        let (tracked, tentative): (Vec<Track>, Vec<Track>) = std::mem::take(&mut self.tracked).into_iter().partition(|t| t.activated);
        let mut pool: Vec<Track> = tracked.into_iter().chain(std::mem::take(&mut self.lost)).collect();
        for t in &mut pool {
            if t.phase != Phase::Tracked {
                t.kf.mean[7] = 0.0;
            }
            t.kf.predict();
            t.det = None;
        }

        // 1. Confident detections against tracked and lost tracks, IoU fused with the score.
        let refs: Vec<&Track> = pool.iter().collect();
        let (m1, free_tracks, free_high) =
            assign::assign(&Self::costs(&refs, &high, true), pool.len(), high.len(), p.minimum_matching_threshold as f64);
        for &(ti, di) in &m1 {
            let mut t = pool[ti].clone();
            self.matched(&mut t, high[di]);
            pool[ti] = t;
        }

        // 2. Weak detections against the tracks still unmatched that were tracked last frame.
        let second: Vec<usize> = free_tracks.iter().copied().filter(|&i| pool[i].phase == Phase::Tracked).collect();
        let refs: Vec<&Track> = second.iter().map(|&i| &pool[i]).collect();
        let (m2, free_second, _) =
            assign::assign(&Self::costs(&refs, &low, false), second.len(), low.len(), p.second_matching_threshold as f64);
        for &(si, di) in &m2 {
            let ti = second[si];
            let mut t = pool[ti].clone();
            self.matched(&mut t, low[di]);
            pool[ti] = t;
        }
        for &si in &free_second {
            pool[second[si]].phase = Phase::Lost;
        }

        // 3. Tentative tracks (seen once) against the confident detections left.
        let rest: Vec<(usize, Detection)> = free_high.iter().map(|&i| high[i]).collect();
        let mut tentative: Vec<Track> = tentative;
        for t in &mut tentative {
            t.kf.predict();
            t.det = None;
        }
        let refs: Vec<&Track> = tentative.iter().collect();
        let (m3, _, free_rest) =
            assign::assign(&Self::costs(&refs, &rest, true), tentative.len(), rest.len(), p.tentative_matching_threshold as f64);
        let mut kept_tentative = Vec::new();
        for &(ti, di) in &m3 {
            let mut t = tentative[ti].clone();
            self.matched(&mut t, rest[di]);
            kept_tentative.push(t);
        }
        // Unmatched tentative tracks are dropped (they never had an id).

        // 4. New tracks from confident detections nobody took.
        let mut born = Vec::new();
        for &ri in &free_rest {
            let (di, d) = rest[ri];
            if d.score < p.track_activation_threshold + 0.1 {
                continue;
            }
            let mut t = Track {
                kf: KalmanState::initiate(xyxy_to_xyah(d.bbox)),
                phase: Phase::Tracked,
                activated: self.frame == 1,
                id: None,
                class: d.class,
                score: d.score,
                streak: 1,
                start_frame: self.frame,
                end_frame: self.frame,
                first_seq: seq,
                last_seq: seq,
                hits: 1,
                det: Some(di),
                seen: [Some((self.frame, d.bbox)), None],
            };
            self.maybe_confirm(&mut t);
            born.push(t);
        }

        // 5. Lost tracks past the buffer end.
        let mut ended = Vec::new();
        let end =
            |t: &Track, id: u64| EndedTrack { track_id: id, class: t.class, first_seq: t.first_seq, last_seq: t.last_seq, hits: t.hits };
        let max_lost = p.max_time_lost();
        let (mut tracked, mut lost): (Vec<Track>, Vec<Track>) = pool.into_iter().partition(|t| t.phase == Phase::Tracked);
        lost.retain(|t| {
            let keep = self.frame - t.end_frame <= max_lost;
            if !keep && let Some(id) = t.id {
                ended.push(end(t, id));
            }
            keep
        });
        tracked.extend(kept_tentative);
        tracked.extend(born);

        // 6. A lost track overlapping a tracked one almost exactly is a duplicate: keep the older.
        let frame = self.frame;
        let mut drop_tracked = vec![false; tracked.len()];
        let mut drop_lost = vec![false; lost.len()];
        for (i, a) in tracked.iter().enumerate() {
            for (j, b) in lost.iter().enumerate() {
                if a.class == b.class && 1.0 - iou(a.kf.xyxy(), b.kf.xyxy()) < 0.15 {
                    if frame - a.start_frame > frame - b.start_frame {
                        drop_lost[j] = true;
                    } else {
                        drop_tracked[i] = true;
                    }
                }
            }
        }
        let mut i = 0;
        tracked.retain(|t| {
            i += 1;
            let drop = drop_tracked[i - 1];
            // A confirmed track dropped as a duplicate ends here, like a lost one.
            if drop && let Some(id) = t.id {
                ended.push(end(t, id));
            }
            !drop
        });
        let mut j = 0;
        lost.retain(|t| {
            j += 1;
            let drop = drop_lost[j - 1];
            if drop && let Some(id) = t.id {
                ended.push(end(t, id));
            }
            !drop
        });

        let report = |t: &Track, state: TrackState| TrackedBox {
            track_id: t.id,
            state,
            class: t.class,
            detection: t.det,
            smoothed: t.kf.xyxy(),
            score: t.score,
            age: self.frame - t.start_frame + 1,
            hits: t.hits,
        };
        let mut out: Vec<TrackedBox> =
            tracked.iter().map(|t| report(t, if t.id.is_some() { TrackState::Confirmed } else { TrackState::Tentative })).collect();
        out.extend(lost.iter().filter(|t| t.id.is_some()).map(|t| report(t, TrackState::Lost)));
        self.tracked = tracked;
        self.lost = lost;
        Update { tracks: out, ended }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn det(x: f32, y: f32, score: f32) -> Detection {
        Detection { bbox: [x, y, x + 40.0, y + 100.0], score, class: 0 }
    }

    fn ids(u: &Update) -> Vec<Option<u64>> {
        u.tracks.iter().filter(|t| t.state != TrackState::Lost).map(|t| t.track_id).collect()
    }

    /// Two people walking towards each other keep their ids as they pass
    /// (their boxes overlap for several frames).
    #[test]
    fn crossing_objects_keep_their_ids() {
        let mut tr = ByteTracker::new(Params::default());
        let mut walker_of: std::collections::HashMap<u64, usize> = Default::default();
        for f in 0..80 {
            let (a, b) = (100.0 + 4.0 * f as f32, 420.0 - 4.0 * f as f32);
            let u = tr.update(&[det(a, 50.0, 0.9), det(b, 52.0, 0.9)], tr.frame);
            for t in u.tracks.iter().filter(|t| t.state == TrackState::Confirmed) {
                let w = *walker_of.entry(t.track_id.unwrap()).or_insert(t.detection.unwrap());
                assert_eq!(w, t.detection.unwrap(), "frame {f}: id {:?} switched walkers", t.track_id);
            }
        }
        assert_eq!(walker_of.len(), 2, "{walker_of:?}");
    }

    /// Frames the detector skipped: the tracks move on at their velocity,
    /// keep their ids and state, and the next detection matches them.
    #[test]
    fn predicted_frames_move_tracks_and_keep_their_ids() {
        let mut tr = ByteTracker::new(Params::default());
        for f in 0..6 {
            tr.update(&[det(100.0 + 6.0 * f as f32, 50.0, 0.9)], f);
        }
        let mut x = 0.0;
        for f in 6..8 {
            let u = tr.predict(f);
            assert_eq!((u.tracks.len(), u.tracks[0].state, u.tracks[0].track_id), (1, TrackState::Confirmed, Some(1)));
            assert_eq!(u.tracks[0].detection, None);
            x = u.tracks[0].smoothed[0];
        }
        assert!((x - (100.0 + 6.0 * 7.0)).abs() < 3.0, "predicted at x {x}, moving 6 px a frame");
        let u = tr.update(&[det(148.0, 50.0, 0.9)], 8);
        assert_eq!(ids(&u), vec![Some(1)]);
    }

    /// A missed stretch shorter than the buffer: the same id comes back.
    /// Longer: the track ends (reported once) and a new id starts.
    #[test]
    fn lost_tracks_come_back_within_the_buffer_and_end_after_it() {
        let p = Params { lost_track_buffer: 10, ..Params::default() };
        let mut tr = ByteTracker::new(p);
        for f in 0..5 {
            tr.update(&[det(100.0 + f as f32, 50.0, 0.9)], tr.frame);
        }
        for _ in 0..8 {
            let u = tr.update(&[], tr.frame);
            assert_eq!(u.tracks.len(), 1);
            assert_eq!(u.tracks[0].state, TrackState::Lost);
        }
        let u = tr.update(&[det(113.0, 50.0, 0.9)], tr.frame);
        assert_eq!(ids(&u), vec![Some(1)]);
        let mut ended = Vec::new();
        for _ in 0..12 {
            ended.extend(tr.update(&[], tr.frame).ended);
        }
        assert_eq!(ended.len(), 1);
        assert_eq!((ended[0].track_id, ended[0].first_seq, ended[0].last_seq, ended[0].hits), (1, 0, 13, 6));
        tr.update(&[det(300.0, 50.0, 0.9)], tr.frame);
        let u = tr.update(&[det(301.0, 50.0, 0.9)], tr.frame);
        assert_eq!(ids(&u), vec![Some(2)]);
    }

    /// The buffer is given at 30 fps and scales with the frame rate.
    #[test]
    fn buffer_scales_with_frame_rate() {
        assert_eq!(Params::default().max_time_lost(), 30);
        assert_eq!(Params { frame_rate: 15.0, ..Params::default() }.max_time_lost(), 15);
        assert_eq!(Params { frame_rate: 60.0, lost_track_buffer: 10, ..Params::default() }.max_time_lost(), 20);
    }

    /// A weak detection (below the activation threshold) keeps a track going
    /// but never starts one.
    #[test]
    fn weak_detections_extend_tracks_but_do_not_start_them() {
        let mut tr = ByteTracker::new(Params::default());
        tr.update(&[det(100.0, 50.0, 0.9)], tr.frame);
        let u = tr.update(&[det(102.0, 50.0, 0.2), det(400.0, 50.0, 0.2)], tr.frame);
        assert_eq!(ids(&u), vec![Some(1)]);
        assert_eq!(u.tracks[0].detection, Some(0));
        for _ in 0..3 {
            let u = tr.update(&[det(400.0, 50.0, 0.2)], tr.frame);
            assert!(u.tracks.iter().all(|t| t.track_id == Some(1)), "{u:?}");
        }
    }

    /// Boxes of different classes never share a track.
    #[test]
    fn classes_never_share_a_track() {
        let mut tr = ByteTracker::new(Params::default());
        tr.update(&[det(100.0, 50.0, 0.9)], tr.frame);
        let other = Detection { class: 3, ..det(101.0, 50.0, 0.9) };
        let u = tr.update(&[other], tr.frame);
        let lost: Vec<_> = u.tracks.iter().filter(|t| t.state == TrackState::Lost).collect();
        assert_eq!(lost.len(), 1, "the class-0 track lost its box: {u:?}");
        let new: Vec<_> = u.tracks.iter().filter(|t| t.state != TrackState::Lost).collect();
        assert_eq!((new.len(), new[0].class, new[0].track_id), (1, 3, None), "a new tentative track for class 3");
    }

    /// `minimum_consecutive_frames`: no id before that many hits in a row.
    #[test]
    fn tracks_are_tentative_until_confirmed() {
        let mut tr = ByteTracker::new(Params { minimum_consecutive_frames: 3, ..Params::default() });
        let states: Vec<_> = (0..4)
            .map(|f| {
                let u = tr.update(&[det(100.0 + f as f32, 50.0, 0.9)], tr.frame);
                (u.tracks[0].state, u.tracks[0].track_id)
            })
            .collect();
        assert_eq!(
            states,
            vec![
                (TrackState::Tentative, None),
                (TrackState::Tentative, None),
                (TrackState::Confirmed, Some(1)),
                (TrackState::Confirmed, Some(1))
            ]
        );
    }

    /// A track starting after the first frame needs a second frame to be
    /// activated, as in ByteTrack (a lone false positive gets no id).
    #[test]
    fn a_one_frame_blip_gets_no_id() {
        let mut tr = ByteTracker::new(Params::default());
        tr.update(&[], tr.frame);
        let u = tr.update(&[det(100.0, 50.0, 0.9)], tr.frame);
        assert_eq!(ids(&u), vec![None]);
        let u = tr.update(&[], tr.frame);
        assert!(u.tracks.is_empty(), "{u:?}");
        let u = tr.update(&[det(300.0, 50.0, 0.9)], tr.frame);
        assert_eq!(ids(&u), vec![None]);
        let u = tr.update(&[det(301.0, 50.0, 0.9)], tr.frame);
        assert_eq!(ids(&u), vec![Some(1)], "ids are given in order of confirmation, without gaps");
    }
}
