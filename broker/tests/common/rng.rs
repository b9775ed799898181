//! A small deterministic generator (xorshift), so a failing round can be
//! replayed with its seed.

pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (made odd: xorshift never leaves 0).
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    /// A generator seeded by `STROM_SOAK_SEED`, else by the clock; the
    /// seed is printed so the run can be replayed.
    pub fn from_env() -> Rng {
        let seed = std::env::var("STROM_SOAK_SEED")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            })
            | 1;
        println!("seed {seed} (STROM_SOAK_SEED={seed} replays the kill moments)");
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
