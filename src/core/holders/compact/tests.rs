//! Unit tests of the compact form and the byte encoding of holds.

use super::*;

fn hold(fence: u64, expire_at: i64) -> Hold {
    Hold { fence, expire_at }
}

#[test]
fn zigzag_round_trips_at_its_edges() {
    for n in [0, 1, -1, 63, -64, i64::MAX, i64::MIN] {
        assert_eq!(unzigzag(zigzag(n)), n);
    }
    assert_eq!((zigzag(0), zigzag(-1), zigzag(1)), (0, 1, 2));
}

/// Which varints are read is `varint`'s (its own tests); here, that the
/// reader of holds reads them and names a refused one as bad bytes.
#[test]
fn the_reader_reads_varints_and_refuses_a_bad_one_as_bytes() {
    let mut out = Vec::new();
    put_varint(&mut out, 16_384);
    assert_eq!(Reader::new(&out, false).varint(), Ok(16_384));
    assert_eq!(
        Reader::new(&[0x80, 0x00], false).varint(),
        Err(Malformed::Bytes)
    );
}

#[test]
fn holds_read_back_as_written_whatever_their_numbers() {
    let mut holds: Vec<Entry<'_>> = vec![
        (b"a", hold(u64::MAX, i64::MIN), None),
        (b"", hold(0, -1), None),
        (&[7; 300], hold(1, 0), None),
        (b"z", hold(1 << 40, 1_800_000_000_000), None),
        (b"y", hold(5, i64::MAX), None),
    ];
    let data = [9u8; 200];
    for with_data in [false, true] {
        if with_data {
            holds[1].2 = Some(b"d");
            holds[3].2 = Some(&data);
        }
        let (stored, flagged) = encode_stored(holds.iter().copied());
        assert_eq!(flagged, with_data);
        let mut r = Reader::new(&stored, with_data);
        let mut back = Vec::new();
        while let Some(h) = r.next_hold() {
            back.push(h.unwrap());
        }
        assert_eq!(back, holds);
        let c = Compact::from_sorted(holds.iter().copied());
        assert_eq!(c.iter().collect::<Vec<_>>(), holds);
        assert_eq!((c.len(), c.stored()), (5, &stored[..]));
        assert_eq!(c.has_data(), with_data);
        assert_eq!(c.last_expire_at(), Some(i64::MAX));
    }
}

#[test]
fn data_costs_its_bytes_and_a_length_in_each_hold_of_a_set_with_data() {
    let t = [b'x'; 32];
    let now = 1_780_000_000_000;
    let without: Vec<Entry<'_>> = (0..3).map(|i| (&t[..], hold(9 + i, now), None)).collect();
    let mut with = without.clone();
    with[1].2 = Some(&[b'd'; 200]);
    let (a, b) = (
        Compact::from_sorted(without.iter().copied()),
        Compact::from_sorted(with.iter().copied()),
    );
    // One length byte for each hold (0: none), two for 200 bytes, and the data.
    assert_eq!(b.byte_len(), a.byte_len() + 1 + 2 + 1 + 200);
    assert_eq!((a.len(), b.len()), (3, 3));
    assert_eq!(b.find(&t), Some((0, hold(9, now), None)));
    // A set whose last data goes is written without data again.
    let r = b.rebuilt(Some(1), Some((&t[..], hold(10, now), None)));
    assert_eq!(r, a);
    let r = a.rebuilt(Some(2), Some((&t[..], hold(11, now), Some(b"x"))));
    assert!(r.has_data());
    assert_eq!(
        r.iter().last(),
        Some((&t[..], hold(11, now), Some(&b"x"[..])))
    );
}

#[test]
fn a_hold_costs_its_token_and_a_few_bytes() {
    let t = [b'x'; 32];
    let now = 1_780_000_000_000;
    let fence = 0x0000_2000_0000_0000;
    let one = Compact::from_sorted([(&t[..], hold(fence, now), None)].into_iter());
    assert_eq!(one.byte_len(), 1 + 6 + 7 + 1 + 32);
    let ten: Vec<Entry<'_>> = (0..10)
        .map(|i| (&t[..], hold(fence + i, now + i as i64), None))
        .collect();
    let ten = Compact::from_sorted(ten.into_iter());
    assert_eq!(ten.byte_len(), one.byte_len() + 9 * (1 + 1 + 1 + 32));
}

#[test]
fn rebuilt_drops_and_places_in_order() {
    let c = Compact::from_sorted(
        [
            (&b"a"[..], hold(1, 10), None),
            (b"b", hold(2, 20), None),
            (b"c", hold(3, 30), None),
        ]
        .into_iter(),
    );
    let tokens = |c: &Compact| c.iter().map(|(t, _, _)| t.to_vec()).collect::<Vec<_>>();
    assert_eq!(c.find(b"b"), Some((1, hold(2, 20), None)));
    assert_eq!(c.find(b"zz"), None);
    let r = c.rebuilt(Some(1), Some((b"d", hold(4, 25), None)));
    assert_eq!(tokens(&r), [b"a".to_vec(), b"d".to_vec(), b"c".to_vec()]);
    let r = c.rebuilt(None, Some((b"e", hold(0, 10), None)));
    assert_eq!(tokens(&r)[0], b"e");
    let r = c.rebuilt(None, Some((b"f", hold(9, 99), None)));
    assert_eq!((r.len(), tokens(&r)[3].as_slice()), (4, &b"f"[..]));
    let r = c.rebuilt(Some(0), None).rebuilt(Some(0), None);
    assert_eq!(
        (r.len(), r.first()),
        (1, Some((&b"c"[..], hold(3, 30), None)))
    );
    assert_eq!(r.rebuilt(Some(0), None), Compact::new());
}
