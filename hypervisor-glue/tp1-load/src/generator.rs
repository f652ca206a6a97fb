//! The TPC-B transaction mix: a branch uniformly, a teller uniformly within it, an account
//! from the teller's branch 85 % of the time and else uniformly from the other branches (at
//! scale > 1), a delta uniform in ±999,999 and a random 128-bit transaction id. Every
//! choice comes from the run's seed, each client on its own stream, so a seed reproduces a
//! run's transactions (and repeating a seed repeats its transaction ids: retries, which the
//! target must not apply twice).

use holdfast_tp1_protocol::{
    ACCOUNTS_PER_BRANCH, DELTA_MAGNITUDE_MAX, TELLERS_PER_BRANCH, Transaction, TransactionId,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Percent of transactions whose account is in the teller's branch (TPC-B clause 5.3.5).
const LOCAL_ACCOUNT_PERCENT: u32 = 85;

/// One client's stream of transactions.
pub struct Generator {
    random: ChaCha8Rng,
    scale: u32,
}

impl Generator {
    /// Client `client`'s generator for a run with `seed` against data at `scale` (>= 1).
    pub fn new(seed: u64, client: u64, scale: u32) -> Self {
        let mut random = ChaCha8Rng::seed_from_u64(seed);
        random.set_stream(client);
        Generator {
            random,
            scale: scale.max(1),
        }
    }

    pub fn next_transaction(&mut self) -> Transaction {
        let branch = self.random.random_range(0..self.scale);
        let teller = branch * TELLERS_PER_BRANCH + self.random.random_range(0..TELLERS_PER_BRANCH);
        let local = self.scale == 1 || self.random.random_range(0..100) < LOCAL_ACCOUNT_PERCENT;
        let account_branch = if local {
            branch
        } else {
            // Uniform over the other scale - 1 branches.
            let other = self.random.random_range(0..self.scale - 1);
            if other >= branch { other + 1 } else { other }
        };
        let account =
            account_branch * ACCOUNTS_PER_BRANCH + self.random.random_range(0..ACCOUNTS_PER_BRANCH);
        let delta = self
            .random
            .random_range(-DELTA_MAGNITUDE_MAX..=DELTA_MAGNITUDE_MAX);
        let transaction_id = TransactionId(self.random.random());
        Transaction {
            transaction_id,
            branch,
            teller,
            account,
            delta,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_tp1_protocol::{branch_of_account, branch_of_teller};

    #[test]
    fn the_mix_follows_tpc_b() {
        let mut generator = Generator::new(1, 0, 4);
        let count = 100_000;
        let mut local = 0;
        let mut deltas_seen_negative = false;
        let mut branches = [0u32; 4];
        for _ in 0..count {
            let transaction = generator.next_transaction();
            assert!(transaction.check_range(4).is_ok());
            assert_eq!(branch_of_teller(transaction.teller), transaction.branch);
            assert!(transaction.delta.abs() <= DELTA_MAGNITUDE_MAX);
            deltas_seen_negative |= transaction.delta < 0;
            branches[transaction.branch as usize] += 1;
            if branch_of_account(transaction.account) == transaction.branch {
                local += 1;
            }
        }
        assert!(deltas_seen_negative);
        let local_percent = f64::from(local) * 100.0 / f64::from(count);
        assert!(
            (84.0..86.0).contains(&local_percent),
            "{local_percent} % local"
        );
        for branch_count in branches {
            assert!((24_000..26_000).contains(&branch_count), "{branches:?}");
        }
    }

    #[test]
    fn a_seed_and_client_reproduce_the_stream_and_clients_differ() {
        let take = |seed, client| {
            let mut generator = Generator::new(seed, client, 1);
            (0..10)
                .map(|_| generator.next_transaction())
                .collect::<Vec<_>>()
        };
        assert_eq!(take(5, 0), take(5, 0));
        assert_ne!(take(5, 0), take(5, 1));
        assert_ne!(take(5, 0), take(6, 0));
        let stream = take(5, 0);
        assert!(
            stream
                .iter()
                .all(|transaction| transaction.account < ACCOUNTS_PER_BRANCH)
        );
    }
}
