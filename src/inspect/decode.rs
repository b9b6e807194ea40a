//! Postcard bytes decoded (and `--key` text encoded) by the type name a state's descriptor
//! records (`std::any::type_name`, manifest.md "state descriptor"): integers, `bool`,
//! `char`, floats, `String`/`&str`, `Vec<T>`/slices/arrays, `Option<T>`, tuples, maps,
//! `Box`/`Arc`/`Rc`, `()`, and the TTL wrapper `floe::ttl<T>`. Anything else is not
//! decoded (the caller shows hex, labelled as such): postcard bytes carry no type, so a
//! type floe cannot read is never guessed at.

use std::fmt::Write as _;

/// Nesting deeper than this is not decoded (untrusted bytes, hand-written types).
const MAX_DEPTH: usize = 32;

/// A type floe can decode, parsed from its recorded name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ty {
    /// `bool`.
    Bool,
    /// `u8` (one byte in postcard).
    U8,
    /// `i8` (one byte).
    I8,
    /// `u16`..`u128`, `usize` (varint).
    UVar(u32),
    /// `i16`..`i128`, `isize` (zigzag varint).
    IVar(u32),
    /// `f32` (4 bytes LE).
    F32,
    /// `f64` (8 bytes LE).
    F64,
    /// `char` (as a UTF-8 string).
    Char,
    /// `String`, `&str`, `str`, `Box<str>`.
    Str,
    /// `()`.
    Unit,
    /// `Vec<u8>`, `&[u8]`: shown as bytes.
    Bytes,
    /// `Vec<T>` and other sequences.
    Seq(Box<Ty>),
    /// `[T; N]`.
    Array(Box<Ty>, usize),
    /// `Option<T>`.
    Option(Box<Ty>),
    /// `(A, B, ...)`.
    Tuple(Vec<Ty>),
    /// `BTreeMap<K, V>`, `HashMap<K, V>`.
    Map(Box<Ty>, Box<Ty>),
    /// `floe::ttl<T>`: an 8-byte LE `last_update`, then `T`.
    Ttl(Box<Ty>),
}

/// Splits `s` at top-level commas (outside `<>`, `()`, `[]`).
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '<' | '(' | '[' => depth += 1,
            '>' | ')' | ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    let last = s[start..].trim();
    if !last.is_empty() {
        out.push(last);
    }
    out
}

/// The last path segment of a generic's outer name: `alloc::vec::Vec` -> `Vec`.
fn base(s: &str) -> &str {
    s.rsplit("::").next().unwrap_or(s)
}

impl Ty {
    /// Parses a recorded type name; `None` for a type floe does not decode.
    pub fn parse(name: &str) -> Option<Ty> {
        Self::parse_at(name.trim(), 0)
    }

    fn parse_at(s: &str, depth: usize) -> Option<Ty> {
        if depth > MAX_DEPTH {
            return None;
        }
        let s = s.trim();
        let inner = |t: &str| Self::parse_at(t, depth + 1);
        if let Some(rest) = s.strip_prefix('&') {
            let rest = rest.trim_start_matches("mut ").trim();
            return match rest {
                "str" => Some(Ty::Str),
                "[u8]" => Some(Ty::Bytes),
                _ if rest.starts_with('[') && rest.ends_with(']') => {
                    Some(Ty::Seq(Box::new(inner(&rest[1..rest.len() - 1])?)))
                }
                _ => inner(rest),
            };
        }
        if s.starts_with('(') && s.ends_with(')') {
            let parts = split_top(&s[1..s.len() - 1]);
            if parts.is_empty() {
                return Some(Ty::Unit);
            }
            let tys: Option<Vec<Ty>> = parts.iter().map(|p| inner(p)).collect();
            return Some(Ty::Tuple(tys?));
        }
        if s.starts_with('[') && s.ends_with(']') {
            let body = &s[1..s.len() - 1];
            let parts: Vec<&str> = body.rsplitn(2, ';').collect();
            return match parts.as_slice() {
                [n, t] => Some(Ty::Array(Box::new(inner(t)?), n.trim().parse().ok()?)),
                [t] => Some(Ty::Seq(Box::new(inner(t)?))),
                _ => None,
            };
        }
        if let Some(open) = s.find('<') {
            if !s.ends_with('>') {
                return None;
            }
            let outer = base(&s[..open]);
            let args = split_top(&s[open + 1..s.len() - 1]);
            if s.starts_with("floe::ttl<") && args.len() == 1 {
                return Some(Ty::Ttl(Box::new(inner(args[0])?)));
            }
            return match (outer, args.as_slice()) {
                ("Vec" | "VecDeque" | "BTreeSet" | "HashSet" | "LinkedList", [t]) => {
                    let t = inner(t)?;
                    Some(if t == Ty::U8 && outer == "Vec" { Ty::Bytes } else { Ty::Seq(Box::new(t)) })
                }
                ("Option", [t]) => Some(Ty::Option(Box::new(inner(t)?))),
                ("Box" | "Arc" | "Rc", [t]) => match t.trim() {
                    "str" => Some(Ty::Str),
                    "[u8]" => Some(Ty::Bytes),
                    t => inner(t),
                },
                ("BTreeMap" | "HashMap", [k, v, ..]) => {
                    Some(Ty::Map(Box::new(inner(k)?), Box::new(inner(v)?)))
                }
                _ => None,
            };
        }
        Some(match base(s) {
            "bool" => Ty::Bool,
            "u8" => Ty::U8,
            "i8" => Ty::I8,
            "u16" => Ty::UVar(16),
            "u32" => Ty::UVar(32),
            "u64" | "usize" => Ty::UVar(64),
            "u128" => Ty::UVar(128),
            "i16" => Ty::IVar(16),
            "i32" => Ty::IVar(32),
            "i64" | "isize" => Ty::IVar(64),
            "i128" => Ty::IVar(128),
            "f32" => Ty::F32,
            "f64" => Ty::F64,
            "char" => Ty::Char,
            "String" | "str" => Ty::Str,
            _ => return None,
        })
    }
}

/// A decoded value.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    /// `bool`.
    Bool(bool),
    /// Any unsigned integer.
    U(u128),
    /// Any signed integer.
    I(i128),
    /// A float.
    F(f64),
    /// A string or char.
    Str(String),
    /// Bytes.
    Bytes(Vec<u8>),
    /// `()`.
    Unit,
    /// `None`.
    None,
    /// `Some(v)`.
    Some(Box<Val>),
    /// A sequence or array.
    Seq(Vec<Val>),
    /// A tuple.
    Tuple(Vec<Val>),
    /// A map.
    Map(Vec<(Val, Val)>),
    /// A TTL value: when it was last updated, and the value.
    Ttl(i64, Box<Val>),
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.at.checked_add(n)?;
        let s = self.b.get(self.at..end)?;
        self.at = end;
        Some(s)
    }

    fn varint(&mut self, bits: u32) -> Option<u128> {
        let mut v: u128 = 0;
        let max_bytes = bits.div_ceil(7) as usize;
        for i in 0..max_bytes {
            let x = *self.take(1)?.first()?;
            v |= u128::from(x & 0x7f) << (7 * i);
            if x & 0x80 == 0 {
                return (bits == 128 || v >> bits == 0).then_some(v);
            }
        }
        None
    }

    fn len(&mut self) -> Option<usize> {
        let n = usize::try_from(self.varint(64)?).ok()?;
        // Every element takes at least one byte, except in sequences of `()`: bounded by
        // what is left, so a hostile length never allocates.
        (n <= self.b.len() - self.at).then_some(n)
    }

    fn val(&mut self, t: &Ty, depth: usize) -> Option<Val> {
        if depth > MAX_DEPTH {
            return None;
        }
        Some(match t {
            Ty::Bool => match *self.take(1)?.first()? {
                0 => Val::Bool(false),
                1 => Val::Bool(true),
                _ => return None,
            },
            Ty::U8 => Val::U(u128::from(*self.take(1)?.first()?)),
            Ty::I8 => Val::I(i128::from(*self.take(1)?.first()? as i8)),
            Ty::UVar(bits) => Val::U(self.varint(*bits)?),
            Ty::IVar(bits) => {
                let z = self.varint(*bits)?;
                Val::I((z >> 1) as i128 ^ -((z & 1) as i128))
            }
            Ty::F32 => Val::F(f64::from(f32::from_le_bytes(self.take(4)?.try_into().ok()?))),
            Ty::F64 => Val::F(f64::from_le_bytes(self.take(8)?.try_into().ok()?)),
            Ty::Char | Ty::Str => {
                let n = self.len()?;
                let s = std::str::from_utf8(self.take(n)?).ok()?.to_string();
                if *t == Ty::Char && s.chars().count() != 1 {
                    return None;
                }
                Val::Str(s)
            }
            Ty::Unit => Val::Unit,
            Ty::Bytes => {
                let n = self.len()?;
                Val::Bytes(self.take(n)?.to_vec())
            }
            Ty::Seq(e) => {
                let n = self.len()?;
                let mut v = Vec::new();
                for _ in 0..n {
                    v.push(self.val(e, depth + 1)?);
                }
                Val::Seq(v)
            }
            Ty::Array(e, n) => {
                if *n > self.b.len() - self.at && **e != Ty::Unit {
                    return None;
                }
                let mut v = Vec::new();
                for _ in 0..*n {
                    v.push(self.val(e, depth + 1)?);
                }
                Val::Seq(v)
            }
            Ty::Option(e) => match *self.take(1)?.first()? {
                0 => Val::None,
                1 => Val::Some(Box::new(self.val(e, depth + 1)?)),
                _ => return None,
            },
            Ty::Tuple(ts) => Val::Tuple(ts.iter().map(|t| self.val(t, depth + 1)).collect::<Option<_>>()?),
            Ty::Map(k, v) => {
                let n = self.len()?;
                let mut out = Vec::new();
                for _ in 0..n {
                    out.push((self.val(k, depth + 1)?, self.val(v, depth + 1)?));
                }
                Val::Map(out)
            }
            Ty::Ttl(e) => {
                let ts = i64::from_le_bytes(self.take(8)?.try_into().ok()?);
                Val::Ttl(ts, Box::new(self.val(e, depth + 1)?))
            }
        })
    }
}

/// Decodes `bytes` as a `t`, all of them; `None` when they do not decode as one.
pub fn decode(t: &Ty, bytes: &[u8]) -> Option<Val> {
    let mut r = Reader { b: bytes, at: 0 };
    let v = r.val(t, 0)?;
    (r.at == bytes.len()).then_some(v)
}

impl Val {
    /// A Rust-like rendering: `42`, `"alice"`, `(3, -5)`, `Some(1)`, `[1, 2]`.
    pub fn render(&self) -> String {
        let mut s = String::new();
        self.render_into(&mut s);
        s
    }

    fn render_into(&self, s: &mut String) {
        let list = |s: &mut String, items: &[Val], open: &str, close: &str| {
            s.push_str(open);
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                v.render_into(s);
            }
            if open == "(" && items.len() == 1 {
                s.push(',');
            }
            s.push_str(close);
        };
        match self {
            Val::Bool(b) => {
                let _ = write!(s, "{b}");
            }
            Val::U(n) => {
                let _ = write!(s, "{n}");
            }
            Val::I(n) => {
                let _ = write!(s, "{n}");
            }
            Val::F(f) => {
                let _ = write!(s, "{f:?}");
            }
            Val::Str(t) => {
                let _ = write!(s, "{t:?}");
            }
            Val::Bytes(b) => {
                let _ = write!(s, "0x{}", crate::format::manifest::hex_encode(b));
            }
            Val::Unit => s.push_str("()"),
            Val::None => s.push_str("None"),
            Val::Some(v) => {
                s.push_str("Some(");
                v.render_into(s);
                s.push(')');
            }
            Val::Seq(items) => list(s, items, "[", "]"),
            Val::Tuple(items) => list(s, items, "(", ")"),
            Val::Map(es) => {
                s.push('{');
                for (i, (k, v)) in es.iter().enumerate() {
                    if i > 0 {
                        s.push_str(", ");
                    }
                    k.render_into(s);
                    s.push_str(": ");
                    v.render_into(s);
                }
                s.push('}');
            }
            Val::Ttl(ts, v) => {
                v.render_into(s);
                let _ = write!(s, " (last update {ts})");
            }
        }
    }

    /// The JSON form: numbers (strings beyond 2^53), strings, `null` for `None`, arrays for
    /// sequences and tuples, `[[k, v], ...]` for maps, bytes as hex, TTL values as
    /// `{"last_update": T, "value": V}`.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        const EXACT: u128 = 1 << 53;
        match self {
            Val::Bool(b) => J::Bool(*b),
            Val::U(n) if *n < EXACT => J::from(*n as u64),
            Val::I(n) if n.unsigned_abs() < EXACT => J::from(*n as i64),
            Val::U(n) => J::String(n.to_string()),
            Val::I(n) => J::String(n.to_string()),
            Val::F(f) => serde_json::Number::from_f64(*f).map_or_else(|| J::String(f.to_string()), J::Number),
            Val::Str(t) => J::String(t.clone()),
            Val::Bytes(b) => J::String(crate::format::manifest::hex_encode(b)),
            Val::Unit | Val::None => J::Null,
            Val::Some(v) => v.to_json(),
            Val::Seq(items) | Val::Tuple(items) => J::Array(items.iter().map(Val::to_json).collect()),
            Val::Map(es) => {
                J::Array(es.iter().map(|(k, v)| J::Array(vec![k.to_json(), v.to_json()])).collect())
            }
            Val::Ttl(ts, v) => serde_json::json!({ "last_update": ts, "value": v.to_json() }),
        }
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u128) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// Encodes the text of a `--key` as a `t` with postcard: integers, `bool`, `char`, floats
/// and strings as written (a string needs no quotes; quotes are taken off), `Option` as
/// `None` / `Some(x)` / `x`, tuples as `(a, b)` or `a,b`. `Err` says why it does not parse.
pub fn encode_text(t: &Ty, text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    encode_into(t, text.trim(), &mut out, 0)?;
    Ok(out)
}

fn encode_into(t: &Ty, text: &str, out: &mut Vec<u8>, depth: usize) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err("too deeply nested".into());
    }
    let bad = |what: &str| format!("{text:?} is not {what}");
    let unquote = |s: &str| -> String {
        let s = s.trim();
        if s.len() >= 2 && s.starts_with('"') && s.ends_with('"') {
            s[1..s.len() - 1].to_string()
        } else {
            s.to_string()
        }
    };
    match t {
        Ty::Bool => out.push(match text {
            "true" => 1,
            "false" => 0,
            _ => return Err(bad("a bool (true or false)")),
        }),
        Ty::U8 => out.push(text.parse::<u8>().map_err(|_| bad("a u8"))?),
        Ty::I8 => out.push(text.parse::<i8>().map_err(|_| bad("an i8"))? as u8),
        Ty::UVar(bits) => {
            let v = text.parse::<u128>().map_err(|_| bad(&format!("a u{bits}")))?;
            if *bits < 128 && v >> bits != 0 {
                return Err(bad(&format!("a u{bits} (too large)")));
            }
            put_varint(out, v);
        }
        Ty::IVar(bits) => {
            let v = text.parse::<i128>().map_err(|_| bad(&format!("an i{bits}")))?;
            let (min, max) = if *bits == 128 {
                (i128::MIN, i128::MAX)
            } else {
                (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
            };
            if v < min || v > max {
                return Err(bad(&format!("an i{bits} (out of range)")));
            }
            put_varint(out, (v.wrapping_shl(1) ^ (v >> 127)) as u128);
        }
        Ty::F32 => out.extend_from_slice(&text.parse::<f32>().map_err(|_| bad("an f32"))?.to_le_bytes()),
        Ty::F64 => out.extend_from_slice(&text.parse::<f64>().map_err(|_| bad("an f64"))?.to_le_bytes()),
        Ty::Char | Ty::Str => {
            let s = unquote(text);
            if *t == Ty::Char && s.chars().count() != 1 {
                return Err(bad("one char"));
            }
            put_varint(out, s.len() as u128);
            out.extend_from_slice(s.as_bytes());
        }
        Ty::Unit => {
            if text != "()" {
                return Err(bad("()"));
            }
        }
        Ty::Option(e) => {
            if text == "None" {
                out.push(0);
            } else {
                out.push(1);
                let inner = text.strip_prefix("Some(").and_then(|r| r.strip_suffix(')')).unwrap_or(text);
                encode_into(e, inner.trim(), out, depth + 1)?;
            }
        }
        Ty::Tuple(ts) => {
            let body = text.strip_prefix('(').and_then(|r| r.strip_suffix(')')).unwrap_or(text);
            let parts = split_top(body);
            if parts.len() != ts.len() {
                return Err(format!("{text:?} has {} parts, the key type has {}", parts.len(), ts.len()));
            }
            for (t, p) in ts.iter().zip(parts) {
                encode_into(t, p, out, depth + 1)?;
            }
        }
        Ty::Bytes | Ty::Seq(_) | Ty::Array(..) | Ty::Map(..) | Ty::Ttl(_) => {
            return Err("keys of this type are given as 0x followed by the hex of the encoded key".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt<T: serde::Serialize>(v: &T) -> String {
        let t = Ty::parse(std::any::type_name::<T>()).unwrap();
        decode(&t, &postcard::to_allocvec(v).unwrap()).unwrap().render()
    }

    #[test]
    fn decodes_what_postcard_wrote_by_the_recorded_type_name() {
        assert_eq!(rt(&300u64), "300");
        assert_eq!(rt(&-3i64), "-3");
        assert_eq!(rt(&7u8), "7");
        assert_eq!(rt(&"alice".to_string()), "\"alice\"");
        assert_eq!(rt(&(3u64, -5i64)), "(3, -5)");
        assert_eq!(rt(&Some(1u32)), "Some(1)");
        assert_eq!(rt(&None::<u32>), "None");
        assert_eq!(rt(&vec![1u16, 2]), "[1, 2]");
        assert_eq!(rt(&vec![0xabu8, 1]), "0xab01");
        assert_eq!(rt(&true), "true");
        assert_eq!(rt(&('x', 1.5f64)), "(\"x\", 1.5)");
        assert_eq!(rt(&[1u32, 2, 3]), "[1, 2, 3]");
        let m: std::collections::BTreeMap<String, u64> = [("a".to_string(), 1)].into();
        assert_eq!(rt(&m), "{\"a\": 1}");
        // The TTL wrapper: 8 bytes LE, then the value.
        let t = Ty::parse("floe::ttl<u64>").unwrap();
        let mut b = 1000i64.to_le_bytes().to_vec();
        b.push(7);
        assert_eq!(decode(&t, &b).unwrap().render(), "7 (last update 1000)");
    }

    #[test]
    fn refuses_what_does_not_fit_and_types_it_does_not_know() {
        let u = Ty::parse("u64").unwrap();
        assert_eq!(decode(&u, &[0x05, 0x00]), None, "trailing bytes");
        assert_eq!(decode(&u, &[0xff]), None, "truncated varint");
        assert_eq!(decode(&Ty::parse("u8").unwrap(), &[]), None);
        assert_eq!(decode(&Ty::parse("alloc::string::String").unwrap(), &[0x7f, b'a']), None);
        assert_eq!(Ty::parse("my_crate::Event"), None);
        assert_eq!(Ty::parse("alloc::vec::Vec<my_crate::Event>"), None);
    }

    #[test]
    fn encodes_key_text_as_postcard_would() {
        let enc = |name: &str, text: &str| encode_text(&Ty::parse(name).unwrap(), text);
        assert_eq!(enc("u64", "5").unwrap(), postcard::to_allocvec(&5u64).unwrap());
        assert_eq!(enc("u64", "300").unwrap(), postcard::to_allocvec(&300u64).unwrap());
        assert_eq!(enc("i32", "-7").unwrap(), postcard::to_allocvec(&-7i32).unwrap());
        assert_eq!(enc("alloc::string::String", "alice").unwrap(), postcard::to_allocvec("alice").unwrap());
        assert_eq!(
            enc("(u64, alloc::string::String)", "(1, b)").unwrap(),
            postcard::to_allocvec(&(1u64, "b")).unwrap()
        );
        assert_eq!(
            enc("core::option::Option<u8>", "Some(3)").unwrap(),
            postcard::to_allocvec(&Some(3u8)).unwrap()
        );
        assert!(enc("u64", "alice").is_err());
        assert!(enc("u8", "300").is_err());
        assert!(enc("i8", "-129").is_err());
    }
}
