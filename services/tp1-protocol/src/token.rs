//! The 128-bit sparse capability every request carries (Mungi's password capabilities):
//! whoever shows the bytes holds the right. The admin service mints tokens from a real
//! entropy source; the TP1 service compares a request's token with every valid one in
//! constant time, so that neither the reply nor its timing says how near a guess came.

use subtle::{Choice, ConditionallySelectable, ConstantTimeEq};

/// A token's bytes. `Debug` shows only that it is a token, so logs do not leak it; there is
/// no `==`, whose early exit would leak timing: use [`tokens_equal_constant_time`].
#[derive(Clone, Copy)]
pub struct Token(pub [u8; 16]);

impl core::fmt::Debug for Token {
    fn fmt(&self, formatter: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        formatter.write_str("Token(..)")
    }
}

impl Token {
    /// Parses 32 hexadecimal digits (either case), as `holdfast tp1 token` prints them.
    pub fn from_hex(text: &str) -> Option<Token> {
        let digits = text.as_bytes();
        if digits.len() != 32 {
            return None;
        }
        let mut bytes = [0u8; 16];
        for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
            let high = hex_digit_value(pair[0])?;
            let low = hex_digit_value(pair[1])?;
            *byte = high << 4 | low;
        }
        Some(Token(bytes))
    }

    /// The token as 32 lowercase hexadecimal digits.
    pub fn to_hex(&self) -> [u8; 32] {
        let mut text = [0u8; 32];
        for (pair, byte) in text.chunks_exact_mut(2).zip(self.0) {
            pair[0] = HEX_DIGITS[usize::from(byte >> 4)];
            pair[1] = HEX_DIGITS[usize::from(byte & 0xf)];
        }
        text
    }
}

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

fn hex_digit_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

/// Whether two tokens are equal, in time independent of their bytes.
pub fn tokens_equal_constant_time(left: &Token, right: &Token) -> bool {
    bool::from(left.0.ct_eq(&right.0))
}

/// The index of the valid token equal to `candidate`, comparing against every one of
/// `valid` whatever the outcome, so that the time depends only on how many valid tokens
/// there are, never on which matched or how closely a wrong one came.
pub fn token_index_constant_time(candidate: &Token, valid: &[Token]) -> Option<usize> {
    let mut found = Choice::from(0);
    let mut index = 0u64;
    for (position, token) in valid.iter().enumerate() {
        let equal = candidate.0.ct_eq(&token.0);
        index.conditional_assign(&(position as u64), equal);
        found |= equal;
    }
    // The branch is on the verdict alone, which the reply reveals anyway.
    if bool::from(found) {
        usize::try_from(index).ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_refuses_bad_text() {
        let token = Token([
            0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd,
            0xee, 0xff,
        ]);
        let text = token.to_hex();
        assert_eq!(&text, b"00112233445566778899aabbccddeeff");
        let parsed = Token::from_hex("00112233445566778899AABBCCDDEEFF").unwrap();
        assert_eq!(parsed.0, token.0);
        assert!(Token::from_hex("00112233445566778899aabbccddeef").is_none());
        assert!(Token::from_hex("00112233445566778899aabbccddeefg").is_none());
        assert!(Token::from_hex("é0112233445566778899aabbccddeeff").is_none());
    }

    #[test]
    fn the_matching_token_is_found_wherever_it_is() {
        let valid = [Token([1; 16]), Token([2; 16]), Token([3; 16])];
        assert_eq!(token_index_constant_time(&Token([1; 16]), &valid), Some(0));
        assert_eq!(token_index_constant_time(&Token([3; 16]), &valid), Some(2));
        let mut near = [3u8; 16];
        near[15] = 4;
        assert_eq!(token_index_constant_time(&Token(near), &valid), None);
        assert_eq!(token_index_constant_time(&Token([3; 16]), &[]), None);
        assert!(tokens_equal_constant_time(&Token([2; 16]), &valid[1]));
        assert!(!tokens_equal_constant_time(&Token(near), &valid[2]));
    }

    #[test]
    fn debug_does_not_show_the_bytes() {
        use std::format;
        assert_eq!(format!("{:?}", Token([0xab; 16])), "Token(..)");
    }
}
