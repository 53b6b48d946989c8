//! `Detector::worst`: the worst offenders for a live view, in order, without healthy topics.

use super::*;

fn names(r: &Rig, n: usize) -> Vec<(String, State, u32)> {
    r.det
        .worst(n)
        .iter()
        .map(|s| {
            (
                r.det.with_names(|names| names.get(s.id).to_owned()),
                s.state,
                s.missed,
            )
        })
        .collect()
}

#[test]
fn failed_first_most_missed_then_longest_down_then_late_ones() {
    let r = Rig::new(S, 2);
    let (a, b, c, d, e) = (r.add("a"), r.add("b"), r.add("c"), r.add("d"), r.add("e"));
    let f = r.add("f");
    for id in [a, b, c, d, e, f] {
        r.beat(id);
    }
    // b and c stop at 0; e is paused (left out whatever it missed); a, d, f go on until 3 s.
    assert!(r.det.pause(e).unwrap());
    r.at(S);
    for id in [a, d, f] {
        r.beat(id);
    }
    r.at(2 * S);
    for id in [a, d, f] {
        r.beat(id);
    }
    r.at(3 * S);
    for id in [a, f] {
        r.beat(id); // d stops at 2 s
    }
    r.at(3 * S + 500 * MS);
    // b, c: FAILED with 3 missed; d: 1 missed of 2 allowed; a, f: healthy.
    assert_eq!(
        names(&r, 10),
        vec![
            ("b".to_owned(), State::Failed, 3),
            ("c".to_owned(), State::Failed, 3),
            ("d".to_owned(), State::Alive, 1),
        ]
    );
    // c comes back and fails again later: now fewer missed than b and d.
    // c's deadlines: 4.5, 5.5, 6.5 s; at 6.6 s b has missed 6, d 4 (from 2 s), c 3.
    r.beat(c);
    for t in [4 * S, 5 * S, 6 * S] {
        r.at(t);
        r.beat(a);
        r.beat(f);
    }
    r.at(6 * S + 600 * MS);
    assert_eq!(
        names(&r, 10),
        vec![
            ("b".to_owned(), State::Failed, 6),
            ("d".to_owned(), State::Failed, 4),
            ("c".to_owned(), State::Failed, 3),
        ]
    );
    // `n` cuts the list, worst kept.
    assert_eq!(names(&r, 2).len(), 2);
    assert_eq!(names(&r, 1)[0].0, "b");
    assert!(r.det.worst(0).is_empty());
    // A beat for a FAILED topic resumes it at once: d is out.
    r.beat(d);
    assert_eq!(
        names(&r, 10)
            .iter()
            .map(|x| x.0.as_str())
            .collect::<Vec<_>>(),
        ["b", "c"]
    );
}

#[test]
fn ties_in_missed_go_to_the_longest_down() {
    let r = Rig::new(S, 1);
    let x = r.add("x");
    let y = r.add("y");
    r.beat(y);
    r.at(500 * MS);
    r.beat(x); // x's deadlines run half a second after y's
    r.at(1_600 * MS);
    // y failed at 1.0 s, x at 1.5 s: both missed 1, y is down longer.
    assert_eq!(
        names(&r, 5)
            .iter()
            .map(|x| x.0.as_str())
            .collect::<Vec<_>>(),
        ["y", "x"]
    );
}
