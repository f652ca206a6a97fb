//! A tenant's TP1 service: an instance of the TP1 program that a constructor yields on the
//! tenant's bank and meter (`holdfast tenant create --tp1`), and the one message that sets it
//! up.

/// The order of an instance's start capability, sent once, by the admin service, right after
/// the yield; the instance waits for it before it serves, and receives nothing after it.
/// Word 0: the tenant's compartment number (its tokens are those of
/// `tokens::Owner::Tenant(number)`). Capabilities sent: its private listener (of the network
/// service; the appliance's TP1 service hands it the connections whose first request carries
/// one of the tenant's tokens), the bank its database's pages are bought from, the page it
/// writes its counters into (`crate::counters`; the admin service reads it, read-only, for
/// `holdfast vm counters`), and its tokens page, read-only: a page of the tenant's own,
/// bought from that bank, into which the admin service mints the tenant's tokens only
/// (`crate::tokens`), so that the instance can read no other owner's. Reply: 0, or
/// [`BAD_CONFIGURATION`].
pub const CONFIGURE: u64 = 1;

/// The reply to a [`CONFIGURE`] whose compartment number is out of range or that came
/// without a tokens page: the instance stops.
pub const BAD_CONFIGURATION: u64 = 1;
