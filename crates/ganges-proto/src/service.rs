//! A request's service on the wire: one byte for the discipline and its flags, beside the
//! share (u16), the guard interval (u8) and the depth (u8) that travel with it.

use ganges_core::sched::{COPY_MAX, Discipline, Service};

/// Bits 0-1 the discipline, bit 2 runs, bit 3 handoff, bits 4-5 the copy, bit 6 phased, bit
/// 7 level.
pub fn to_byte(s: Service) -> u8 {
    (match s.discipline {
        Discipline::FurthestBehind => 0,
        Discipline::LongestQueue => 1,
        Discipline::Planned => 3,
    }) | (u8::from(s.runs) << 2)
        | (u8::from(s.handoff) << 3)
        | (s.copy.min(COPY_MAX) << 4)
        | (u8::from(s.phased) << 6)
        | (u8::from(s.level) << 7)
}

/// The service a byte names, with its share, guard and depth; `None` for discipline 2, which
/// no build of this protocol version asks for (every other bit of the byte is a field).
pub fn from_byte(b: u8, share: u16, guard_every: u8, depth: u8) -> Option<Service> {
    let discipline = match b & 0b11 {
        0 => Discipline::FurthestBehind,
        1 => Discipline::LongestQueue,
        2 => return None,
        _ => Discipline::Planned,
    };
    Some(Service {
        discipline,
        runs: b & 4 != 0,
        handoff: b & 8 != 0,
        share,
        copy: (b >> 4) & COPY_MAX,
        phased: b & 64 != 0,
        guard_every,
        depth,
        level: b & 128 != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ganges_core::sched::SHARE_ONE;

    const FB: Service = Service::FURTHEST_BEHIND;
    const FB_RUNS: Service = Service { runs: true, ..Service::FURTHEST_BEHIND };
    const LQ: Service = Service { discipline: Discipline::LongestQueue, ..Service::FURTHEST_BEHIND };

    #[test]
    fn service_bytes_round_trip() {
        for s in [
            FB,
            FB_RUNS,
            LQ,
            Service { runs: true, handoff: true, guard_every: 3, depth: 2, ..LQ },
            Service { level: true, ..FB },
            Service {
                discipline: Discipline::Planned,
                runs: true,
                share: SHARE_ONE,
                copy: COPY_MAX,
                phased: true,
                ..FB
            },
        ] {
            assert_eq!(from_byte(to_byte(s), s.share, s.guard_every, s.depth), Some(s));
        }
        for b in 0..=u8::MAX {
            match from_byte(b, 0, 0, 0) {
                Some(s) => assert_eq!(to_byte(s), b, "every other bit is a field"),
                None => assert_eq!(b & 0b11, 2, "only discipline 2 is refused: {b:#010b}"),
            }
        }
    }
}
