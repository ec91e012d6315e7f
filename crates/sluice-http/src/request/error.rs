//! Why a request head was refused, and the status that says so.

/// Why a head was refused. [`ParseError::status`] gives the answer to send; after any
/// of these the connection must be closed, because the framing can no longer be trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseError {
    RequestLineTooLong,
    HeadTooLarge,
    TooManyHeaders,
    Malformed,
    BadVersion,
    MissingHost,
    DuplicateHost,
    BadHost,
    BadContentLength,
    ConflictingFraming,
    BadTransferEncoding,
}

impl ParseError {
    pub fn status(self) -> u16 {
        match self {
            ParseError::RequestLineTooLong => 414,
            ParseError::HeadTooLarge | ParseError::TooManyHeaders => 431,
            ParseError::BadVersion => 505,
            ParseError::BadTransferEncoding => 501,
            _ => 400,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ParseError::RequestLineTooLong => "request line too long",
            ParseError::HeadTooLarge => "request head too large",
            ParseError::TooManyHeaders => "too many header fields",
            ParseError::Malformed => "malformed request",
            ParseError::BadVersion => "unsupported HTTP version",
            ParseError::MissingHost => "missing Host header",
            ParseError::DuplicateHost => "more than one Host header",
            ParseError::BadHost => "invalid Host",
            ParseError::BadContentLength => "invalid Content-Length",
            ParseError::ConflictingFraming => "both Content-Length and Transfer-Encoding",
            ParseError::BadTransferEncoding => "unsupported Transfer-Encoding",
        }
    }
}
