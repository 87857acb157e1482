use std::fmt;

/// A place in the store's one global order: 1-based, gapless, assigned by the single writer.
/// `Position::ZERO` means "before the first event".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position(pub u64);

impl Position {
    pub const ZERO: Position = Position(0);

    pub const fn new(value: u64) -> Self {
        Position(value)
    }

    pub const fn get(self) -> u64 {
        self.0
    }
}

impl From<u64> for Position {
    fn from(value: u64) -> Self {
        Position(value)
    }
}

impl From<Position> for u64 {
    fn from(value: Position) -> Self {
        value.0
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
