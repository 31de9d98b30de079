//! The `DUMP` format: payloads of locks as each encoding version writes them, sealed with the
//! trailer Redis checks.

use super::*;

/// Redis's CRC64 ("Jones" polynomial, reflected, no final xor), as in its `crc64.c`.
pub(crate) fn crc64(data: &[u8]) -> u64 {
    const POLY_REFLECTED: u64 = 0x95ac_9329_ac4b_c9b5;
    let mut crc = 0u64;
    for &b in data {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ POLY_REFLECTED
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// `RDB_TYPE_MODULE_2`: a module value with typed fields and an end marker.
pub(super) const TYPE_MODULE_2: u8 = 7;
pub(super) const OPCODE_EOF: u64 = 0;
pub(super) const OPCODE_UINT: u64 = 2;
pub(super) const OPCODE_STRING: u64 = 5;
/// The record encoding `DUMP` writes: the whole record as one string (`packed`).
pub(super) const ENCODING_VERSION: u64 = 4;
/// The encoding before, which must still load: the record in fields, modes 0 and 1 as in
/// version 1 (with data: its own mode, the data in a field after the token), modes 2 and 3 with
/// the holds packed into one string (`encode_holds`).
pub(super) const HOLDS_PACKED_ENCODING_VERSION: u64 = 3;
/// The encoding before that: modes 2 and 3 with each hold's fence, lease end and token in fields
/// of their own. It must still load.
pub(super) const FIELDS_ENCODING_VERSION: u64 = 2;
/// The encoding of the release before shared locks and semaphores (modes 0 and 1 only), which
/// must still load.
pub(super) const LEGACY_ENCODING_VERSION: u64 = 1;
pub(super) const MODE_EXCLUSIVE: u64 = 0;
pub(super) const MODE_GATE: u64 = 1;
pub(super) const MODE_SHARED: u64 = 2;
pub(super) const MODE_SEMAPHORE: u64 = 3;
/// An exclusive lock with public data (`DATA`): fence, token, data (1 to 4,096 bytes).
pub(super) const MODE_EXCLUSIVE_WITH_DATA: u64 = 4;
/// Holders of which some have public data (versions 3 and 4): as `MODE_SHARED` and
/// `MODE_SEMAPHORE`, with each packed hold followed by its data's length (0: none) and data.
pub(super) const MODE_SHARED_WITH_DATA: u64 = 5;
pub(super) const MODE_SEMAPHORE_WITH_DATA: u64 = 6;
/// What a mode with data is without.
pub(super) const WITH_DATA_OFFSET: u64 = 3;
pub(super) const MAX_DATA: usize = 4096;
pub(super) const MAX_TOKEN: usize = 512;
pub(super) const MAX_LIMIT: u64 = 1_000_000;
pub(super) const TIME_BASE_MS: i64 = 1_735_689_600_000;
pub(super) const DAY_MS: i64 = 86_400_000;
/// The longest TTL (`MAX_TTL_MS`): no restored hold may end later than now plus this.
pub(super) const MAX_TTL_MS: i64 = 1_000_000_000_000;

/// An RDB length: 6, 14, 32 or 64 bits.
pub(super) fn enc_len(n: u64) -> Vec<u8> {
    if n < 64 {
        vec![n as u8]
    } else if n < 16_384 {
        vec![0x40 | (n >> 8) as u8, n as u8]
    } else if n <= u64::from(u32::MAX) {
        let mut v = vec![0x80];
        v.extend_from_slice(&(n as u32).to_be_bytes());
        v
    } else {
        let mut v = vec![0x81];
        v.extend_from_slice(&n.to_be_bytes());
        v
    }
}

/// A string field, written raw.
pub(super) fn push_string(b: &mut Vec<u8>, bytes: &[u8]) {
    b.extend(enc_len(OPCODE_STRING));
    b.extend(enc_len(bytes.len() as u64));
    b.extend_from_slice(bytes);
}

/// An exclusive lock or a gate as the module writes it.
#[derive(Clone, Debug)]
pub(super) struct Fields {
    /// Module type id (54 bits of name) << 10 | encoding version.
    pub(super) module_id: u64,
    pub(super) mode: u64,
    pub(super) fence: u64,
    pub(super) token: Vec<u8>,
    /// Public data: in a field after the token (version 3), or after the token and its length
    /// (version 4).
    pub(super) data: Option<Vec<u8>>,
}

impl Fields {
    pub(super) fn lock(module_id: u64, fence: u64, token: &[u8]) -> Fields {
        Fields {
            module_id,
            mode: MODE_EXCLUSIVE,
            fence,
            token: token.to_vec(),
            data: None,
        }
    }

    pub(super) fn with_data(module_id: u64, fence: u64, token: &[u8], data: &[u8]) -> Fields {
        Fields {
            mode: MODE_EXCLUSIVE_WITH_DATA,
            data: Some(data.to_vec()),
            ..Fields::lock(module_id, fence, token)
        }
    }

    /// Whether the version in the module id writes the record as one string.
    pub(super) fn is_record(&self) -> bool {
        self.module_id & 1023 == ENCODING_VERSION
    }

    /// The record string of version 4.
    pub(super) fn record(&self) -> Vec<u8> {
        packed::single_record(self.mode, self.fence, &self.token, self.data.as_deref())
    }

    /// The payload body (without the trailer) as the version in the module id lays it out,
    /// strings written raw.
    pub(super) fn body(&self) -> Vec<u8> {
        self.laid_out(self.is_record())
    }

    /// The payload body (without the trailer), whatever the module id says: as one record string
    /// (version 4) or in fields (versions 1 to 3).
    pub(super) fn laid_out(&self, as_record: bool) -> Vec<u8> {
        let mut b = self.head(as_record);
        push_string(&mut b, &self.last(as_record));
        b.extend(enc_len(OPCODE_EOF));
        b
    }

    /// The body before its last string field: the module id, then (in fields) mode, fence, and
    /// the token when data follows it.
    pub(super) fn head(&self, as_record: bool) -> Vec<u8> {
        let mut b = vec![TYPE_MODULE_2];
        b.extend(enc_len(self.module_id));
        if as_record {
            return b;
        }
        for v in [self.mode, self.fence] {
            b.extend(enc_len(OPCODE_UINT));
            b.extend(enc_len(v));
        }
        if self.data.is_some() {
            push_string(&mut b, &self.token);
        }
        b
    }

    /// The body's last string field: the record, or (in fields) the data or the token.
    pub(super) fn last(&self, as_record: bool) -> Vec<u8> {
        match &self.data {
            _ if as_record => self.record(),
            Some(data) => data.clone(),
            None => self.token.clone(),
        }
    }
}

/// The kind of a key with holders, as `LOCK.INFO` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Shared,
    Semaphore { limit: u64 },
}

impl Kind {
    /// The mode and the limit the module writes for this kind (holds without data).
    pub(super) fn code(self) -> (u64, u64) {
        match self {
            Kind::Shared => (MODE_SHARED, 0),
            Kind::Semaphore { limit } => (MODE_SEMAPHORE, limit),
        }
    }
}

/// How a key with holders is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Layout {
    /// Version 2: each hold's fence, lease end and token in fields of their own.
    Fields,
    /// Version 3: mode, limit and count in fields, then the holds packed into one string.
    Packed,
    /// Version 4: the whole record as one string, the holds packed at its end.
    Record,
}

impl Layout {
    /// The layout of encoding `version` (any other than 3 and 4: in fields).
    pub(super) fn of(version: u64) -> Layout {
        match version {
            ENCODING_VERSION => Layout::Record,
            HOLDS_PACKED_ENCODING_VERSION => Layout::Packed,
            _ => Layout::Fields,
        }
    }
}

/// The fields of a key with holders as the module writes them; `count` may differ from the
/// holds that follow it, and `packed` (if any) replaces the packed holds.
#[derive(Clone, Debug)]
pub(super) struct HolderFields {
    pub(super) module_id: u64,
    pub(super) mode: u64,
    pub(super) limit: u64,
    pub(super) count: u64,
    pub(super) holds: Vec<Hold>,
    pub(super) layout: Layout,
    pub(super) packed: Option<Vec<u8>>,
}

impl HolderFields {
    /// Holders of `kind` as the module writes them under the encoding version of `module_id`
    /// (packed for versions 3 and 4, in the order of their lease ends; in fields of their own
    /// for any other, in the order given).
    pub(super) fn new(module_id: u64, kind: Kind, mut holds: Vec<Hold>) -> HolderFields {
        let (mut mode, limit) = kind.code();
        let layout = Layout::of(module_id & 1023);
        if layout != Layout::Fields {
            holds.sort_by_key(|h| (h.expire_at, h.fence));
            if any_data(&holds) {
                mode += WITH_DATA_OFFSET;
            }
        }
        HolderFields {
            module_id,
            mode,
            limit,
            count: holds.len() as u64,
            holds,
            layout,
            packed: None,
        }
    }

    /// The same holders under encoding version 2, in fields of their own.
    pub(super) fn as_fields(&self) -> HolderFields {
        HolderFields {
            module_id: (self.module_id & !1023) | FIELDS_ENCODING_VERSION,
            layout: Layout::Fields,
            packed: None,
            ..self.clone()
        }
    }

    /// The same holders under encoding version 3, in fields with the holds packed (the same
    /// packed holds, if they were given).
    pub(super) fn as_version_3(&self) -> HolderFields {
        HolderFields {
            module_id: (self.module_id & !1023) | HOLDS_PACKED_ENCODING_VERSION,
            layout: Layout::Packed,
            ..self.clone()
        }
    }

    /// The packed holds: as given, or as `encode_holds` packs them.
    pub(super) fn packed_holds(&self) -> Vec<u8> {
        self.packed
            .clone()
            .unwrap_or_else(|| encode_holds(&self.holds))
    }

    /// The record string of version 4.
    pub(super) fn record(&self) -> Vec<u8> {
        packed::holders_record(self.mode, self.limit, self.count, &self.packed_holds())
    }

    /// The payload body (without the trailer), tokens, packed holds and the record as raw
    /// strings.
    pub(super) fn body(&self) -> Vec<u8> {
        if self.layout == Layout::Record {
            return packed::record_body(self.module_id, &self.record());
        }
        let mut b = vec![TYPE_MODULE_2];
        b.extend(enc_len(self.module_id));
        for v in [self.mode, self.limit, self.count] {
            b.extend(enc_len(OPCODE_UINT));
            b.extend(enc_len(v));
        }
        match self.layout {
            Layout::Fields => {
                for h in &self.holds {
                    b.extend(enc_len(OPCODE_UINT));
                    b.extend(enc_len(h.fence));
                    // A signed number is saved as the unsigned number with the same bits.
                    b.extend(enc_len(OPCODE_UINT));
                    b.extend(enc_len(h.expire_at as u64));
                    b.extend(enc_len(OPCODE_STRING));
                    b.extend(enc_len(h.token.len() as u64));
                    b.extend_from_slice(&h.token);
                }
            }
            Layout::Packed => push_string(&mut b, &self.packed_holds()),
            Layout::Record => unreachable!("written above"),
        }
        b.extend(enc_len(OPCODE_EOF));
        b
    }
}

/// A `DUMP` payload split into its body and the server's RDB version.
#[derive(Clone, Debug)]
pub(super) struct Dump {
    pub(super) body: Vec<u8>,
    pub(super) version: [u8; 2],
}

impl Dump {
    pub(super) fn parse(payload: &[u8]) -> Dump {
        assert!(payload.len() > 10, "short DUMP payload {payload:?}");
        let (rest, crc) = payload.split_at(payload.len() - 8);
        assert_eq!(
            crc64(rest).to_le_bytes(),
            crc,
            "the CRC64 here is not Redis's"
        );
        let (body, version) = rest.split_at(rest.len() - 2);
        Dump {
            body: body.to_vec(),
            version: [version[0], version[1]],
        }
    }

    /// `body` with this dump's RDB version and a correct CRC.
    pub(super) fn seal(&self, body: &[u8]) -> Vec<u8> {
        let mut p = body.to_vec();
        p.extend_from_slice(&self.version);
        let crc = crc64(&p);
        p.extend_from_slice(&crc.to_le_bytes());
        p
    }
}
