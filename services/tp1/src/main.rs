//! The TP1 service: TPC-B (DebitCredit) transactions from TCP clients, in the wire protocol
//! of docs/tp1-protocol.md, on port 7100 through the network service's capabilities.
//!
//! The database is one region of pages in this program's space (services/tp1-ledger): the
//! program reads it, but changes it only through the journal's guarded `write`, so that a
//! restart, which brings back its registers as the last checkpoint caught them and the
//! region as it was last committed, never applies a transaction twice (the ledger crate says
//! why).
//!
//! The region's pages are bought from the service's space bank by the first `load`, as many
//! as its scale needs (a bank too small for it gets `no_space`), and linked into this
//! program's space at [`REGION_ADDRESS`]. Before the load writes anything into them the
//! service waits for a checkpoint that holds them: the journal makes pages durable, not the
//! purchases, and a commit to pages that a restart would find unsold would be lost with the
//! region (and could reach whoever bought those pages next). That wait, a second or two, is
//! the load's; nothing else is served meanwhile.
//!
//! One loop: wait for the network's events; decode the requests that arrived on every
//! connection; answer reads at once; put the transactions of all connections into batches,
//! each one guarded write (one journal commit, one disk write and flush shared by up to 64
//! transactions: group commit); reply to each only once its batch is durable. While a batch
//! is being written, requests pile up in the network service, and the next wait hands them
//! over together: the busier the clients, the larger the batches.
//!
//! Every request carries a token (a 128-bit password capability) that the admin service
//! minted into the tokens page (`holdfast tp1 token`); a wrong one is refused with
//! `bad_token` after a comparison with every valid token that takes the same time whatever
//! the bytes. The appliance's service reads the appliance's page, which holds every owner's
//! tokens; a tenant's instance reads a page of the tenant's own, which holds only the
//! tenant's (`holdfast_tp1_ledger::tokens`).
//!
//! Its counters (transactions, errors by status, commit latency, open connections) go into a
//! page after each round of work, which the admin service renders for Prometheus.
//!
//! **Tenants.** The program runs as the appliance's own service, on port 7100, and as each
//! tenant's: an instance a constructor yielded on the tenant's bank and meter, which holds no
//! network service nor routes node nor tokens page and waits for one message from the admin
//! service (`holdfast_tp1_ledger::instance::CONFIGURE`: its tenant, a private listener, its
//! bank, its counters page and its tokens page).
//! A tenant's database is its instance's region, so that revoking the tenant (destroying its
//! bank) takes the instance and its pages together and no other database notices. The
//! appliance's service reads the token of each connection's first request as soon as its
//! bytes are in: a tenant's token hands the connection, with the bytes read so far, to that
//! tenant's listener (slot n of the routes node, which the admin service fills); any other
//! is served here. Each service serves only its own tokens and refuses the rest as
//! `bad_token`, so a tenant's token never reaches another's data; and a tenant's instance
//! holds no other owner's tokens to begin with (its page is its own).
//!
//! Capability registers: 0 console, 1 its own process, 2 the network service (badge 0;
//! void in a tenant's instance), 4 the journal, 5 the clock, 6 the tokens page
//! (read-only; an instance receives its tenant's own), 8 the counters page (an instance
//! receives its own), 9 its space bank (received by an instance), 10 the checkpoint control
//! (a load waits for a checkpoint that holds its region's pages: `status` and `take`), 15
//! the routes node (an instance receives its configuration's resume capability there); 3
//! receives its listener and 7 its own space; 11 to 14 are working registers.
#![no_std]
#![no_main]

use holdfast_tp1_ledger::{self as ledger, Added, Batch, Index, Ledger, Refusal, Table, counters::Counters, tokens};
use holdfast_tp1_protocol::{
    self as protocol, BranchSums, HistoryRecord, Operation, Reply, ReplyPayload, Request,
    RequestFrameDecoder, Status, SummaryTotals, Token, TransactionResult, request::TransactionId,
};
use holdfast_userlib::{self as user, net};
use user::abi::methods::ObjectError;
use user::abi::interface::Type;
use user::{bank, checkpointed};
use user::interface::{clock, identify, journal, node, page, process, space};
use user::syscall::{CapReg, Error};

const OWN_PROCESS: CapReg = CapReg::new(1);
const NETWORK: CapReg = CapReg::new(2);
const LISTENER: CapReg = CapReg::new(3);
const JOURNAL: CapReg = CapReg::new(4);
const CLOCK: CapReg = CapReg::new(5);
const TOKENS: CapReg = CapReg::new(6);
const SPACE: CapReg = CapReg::new(7);
const COUNTERS: CapReg = CapReg::new(8);
const BANK: CapReg = CapReg::new(9);
const CHECKPOINT: CapReg = CapReg::new(10);
/// The region's tree is walked down alternating these two.
const WALK: [CapReg; 2] = [CapReg::new(11), CapReg::new(12)];
const MADE: CapReg = CapReg::new(13);
const SCRATCH: CapReg = CapReg::new(14);
/// Slot n: tenant n's private listener (the appliance's service only).
const ROUTES: CapReg = CapReg::new(15);
/// Where an instance's configuration's resume capability lands (it has no routes).
const CONFIGURATION_RESUME: u8 = 15;
const PORT: u16 = 7100;
/// A connection's first bytes, kept by the appliance's service until its first request's
/// token is in: the most the network service hands over with a connection.
const HEAD_BYTES_MAX: usize = user::abi::INVOCATION_STRING_BYTES_MAX;
/// Where the first request's token ends in its connection's bytes: the length prefix and
/// the request header, which the token ends.
const HEAD_TOKEN_END: usize = protocol::LENGTH_PREFIX_BYTES + protocol::REQUEST_HEADER_BYTES;
/// Where the first request's id starts in its connection's bytes (after the version, opcode
/// and flags).
const REQUEST_ID_AT: usize = protocol::LENGTH_PREFIX_BYTES + 4;

/// Connections served at once; one more evicts the one that has been quiet longest, if that
/// is over [`QUIET_EVICT_US`] (an idle or slowloris client), else is closed at once.
const CONNECTIONS_MAX: usize = 128;
/// Reply bytes a connection may have waiting for the network service to take (sent on its
/// `writable` events); a client that sends requests without reading replies is closed when
/// it overflows. Room for 16 pipelined `history` replies.
const OUT_BYTES: usize = 64 * 1024;
/// Transactions waiting for a batch: beyond it, `busy`.
const PENDING_MAX: usize = 1024;
/// A connection quiet for longer than this may be evicted for a new one.
const QUIET_EVICT_US: u64 = 1_000_000;
/// Attempts at one batch whose guard moved (a restart between computing and writing it).
const WRITE_ATTEMPTS_MAX: usize = 4;

/// Where the region starts in this program's space: slot 1 of its root (height 7), far from
/// the program (slot 0) and its stack (slot 31). Written only by the kernel, through the
/// journal.
const REGION_ADDRESS: u64 = 1 << 42;
/// The height of the program's space, whose root slot at [`REGION_ADDRESS`] (4 TiB) holds the
/// whole region and nothing else.
const SPACE_HEIGHT: u64 = 7;
const _: () = assert!(REGION_ADDRESS.is_multiple_of(4096 << (5 * (SPACE_HEIGHT - 1))));
const _: () = assert!(ledger::REGION_BYTES <= 4096 << (5 * (SPACE_HEIGHT - 1)));
/// How long a load waits for the checkpoint that holds the region's new pages.
const REGION_CHECKPOINT_US_MAX: u64 = 60_000_000;
const PAGE_BYTES: u64 = ledger::PAGE_BYTES as u64;

/// The id index: derived from the history (checkpointed, not journaled).
static mut INDEX_SLOTS: [u32; ledger::INDEX_SLOTS] = [0; ledger::INDEX_SLOTS];
static mut INDEX_COVERED: u64 = 0;

static mut STATE: State = State::new();

/// A connection's state, apart from its buffers ([`Buffers`]): every round looks at each
/// slot's, and kept beside its 69 KiB of buffers each slot's was on a page of its own. After
/// a restart, when no page is in memory, the first round's look at 128 slots waited for
/// 128 page loads (30-100 ms of a failover's outage under TCG); here they share a page or two.
struct Connection {
    /// The network service's id for it; 0 when the slot is free.
    id: u32,
    /// When it last sent anything, or opened (see [`QUIET_EVICT_US`]).
    active_us: u64,
    /// Bytes of replies waiting in its [`Buffers::out`].
    out_length: usize,
    /// Close once its replies are out (it sent a frame it could not be framed from, or it
    /// sends no more).
    closing: bool,
    /// Its first request's token is not in yet (the appliance's service only): its bytes
    /// wait in [`Buffers::head`], which go to a tenant's service if the token is the tenant's.
    undecided: bool,
    /// Bytes waiting in its [`Buffers::head`].
    head_length: usize,
}

impl Connection {
    const FREE: Connection = Connection { id: 0, active_us: 0, out_length: 0, closing: false, undecided: false, head_length: 0 };
}

/// A connection slot's buffers, touched only when it has bytes to decode or send.
struct Buffers {
    decoder: RequestFrameDecoder,
    out: [u8; OUT_BYTES],
    /// Its first bytes, while it is `undecided`.
    head: [u8; HEAD_BYTES_MAX],
}

impl Buffers {
    const EMPTY: Buffers = Buffers { decoder: RequestFrameDecoder::for_requests(), out: [0; OUT_BYTES], head: [0; HEAD_BYTES_MAX] };
}

#[derive(Clone, Copy)]
struct Pending {
    slot: u16,
    connection: u32,
    request_id: u64,
    transaction: ledger::Transaction,
}

struct State {
    connections: [Connection; CONNECTIONS_MAX],
    /// Slot `i`'s buffers are `connections[i]`'s.
    buffers: [Buffers; CONNECTIONS_MAX],
    pending: [Pending; PENDING_MAX],
    pending_count: usize,
    /// Whose tokens this service serves: the appliance's, or a tenant's (its instance).
    owner: tokens::Owner,
    /// Every valid token of the tokens page (the appliance's: whoever's; an instance's: its
    /// tenant's), and what each grants.
    tokens: [[u8; 16]; tokens::ENTRIES_MAX],
    grants: [tokens::Grant; tokens::ENTRIES_MAX],
    token_count: usize,
    index_key: [u64; 2],
    events: [u8; net::WAIT_BYTES_MAX],
    now_us: u64,
    counters: Counters,
    /// The region's pages linked into the space, from its start.
    region_pages: u64,
    /// Of those, how many a committed checkpoint holds: the journal writes only to these.
    region_pages_checkpointed: u64,
}

impl State {
    const fn new() -> Self {
        const NONE: Pending = Pending {
            slot: 0,
            connection: 0,
            request_id: 0,
            transaction: ledger::Transaction { id: [0; 16], branch: 0, teller: 0, account: 0, delta: 0 },
        };
        Self {
            connections: [Connection::FREE; CONNECTIONS_MAX],
            buffers: [Buffers::EMPTY; CONNECTIONS_MAX],
            pending: [NONE; PENDING_MAX],
            pending_count: 0,
            owner: tokens::Owner::Appliance,
            tokens: [[0; 16]; tokens::ENTRIES_MAX],
            grants: [tokens::Grant { kind: tokens::Kind::Client, owner: tokens::Owner::Appliance }; tokens::ENTRIES_MAX],
            token_count: 0,
            index_key: [0; 2],
            events: [0; net::WAIT_BYTES_MAX],
            now_us: 0,
            counters: Counters {
                transactions_total: 0,
                errors_total: [0; ledger::counters::STATUS_CODES],
                commits_total: 0,
                commit_nanoseconds_sum: 0,
                commit_buckets: [0; ledger::counters::COMMIT_BUCKETS_SECONDS.len() + 1],
                connections_open: 0,
                tokens: 0,
            },
            region_pages: 0,
            region_pages_checkpointed: 0,
        }
    }
}

/// A view of the database, if its pages are there (a load buys them). Made afresh after
/// every invocation and never held across one: the kernel changes the region during the
/// journal's `write`.
fn ledger_view(region_pages: u64) -> Option<Ledger<'static>> {
    let bytes = region_pages * PAGE_BYTES;
    if bytes < ledger::region_bytes(0) {
        return None;
    }
    // SAFETY: `build_region` linked `region_pages` pages into this program's space from
    // REGION_ADDRESS on before it counted them, and nothing unlinks them: the bytes are
    // mapped and readable. The kernel writes them only during this program's own journal
    // invocations, none of which happens while the view lives (see above).
    Some(Ledger::new(unsafe { core::slice::from_raw_parts(REGION_ADDRESS as *const u8, bytes as usize) }))
}

/// Why the region could not be made ready for a load.
enum RegionError {
    /// The bank refused a page or node: its limit, or the store's.
    NoSpace,
    /// Anything else, said on the console.
    Failed,
}

/// The space node of height `height` in `parent`'s `slot` into `into`, bought from the
/// bank and linked if the slot is empty.
fn node_below(parent: CapReg, slot: u64, height: u64, into: CapReg) -> Result<(), RegionError> {
    space::fetch(parent, slot, into).map_err(|error| failed(b"fetching a region node", error))?;
    if identify(into).is_ok_and(|identity| identity.type_code == Type::Space as u64) {
        return Ok(());
    }
    bank::buy_node(BANK, into).map_err(bank_refusal)?;
    node::make_space(into, height, 0, into).map_err(|error| failed(b"make_space", error))?;
    space::swap(parent, slot, into, SCRATCH).map_err(|error| failed(b"linking a region node", error))
}

fn bank_refusal(error: Error) -> RegionError {
    match error {
        Error::Reply(bank::refusal::LIMIT_REACHED | bank::refusal::STORE_FULL | bank::refusal::TOO_MANY_OBJECTS) => {
            RegionError::NoSpace
        }
        error => failed(b"buying the region", error),
    }
}

fn failed(what: &[u8], error: Error) -> RegionError {
    report(what, error_code(error));
    RegionError::Failed
}

impl State {
    /// Buys and links the region's pages up to `pages`, counting each once linked, so that a
    /// refusal part way keeps what was bought for the next try.
    fn build_region(&mut self, pages: u64) -> Result<(), RegionError> {
        let next_page = |pages: u64| REGION_ADDRESS + pages * PAGE_BYTES;
        while self.region_pages < pages {
            // Down to the height-1 node of the next page, making what is missing.
            let mut at = SPACE;
            for (height, &into) in (1..SPACE_HEIGHT).rev().zip(WALK.iter().cycle()) {
                node_below(at, user::space::slot(height + 1, next_page(self.region_pages)), height, into)?;
                at = into;
            }
            while self.region_pages < pages {
                bank::buy_page(BANK, MADE).map_err(bank_refusal)?;
                space::swap(at, user::space::slot(1, next_page(self.region_pages)), MADE, SCRATCH)
                    .map_err(|error| failed(b"linking a region page", error))?;
                self.region_pages += 1;
                if self.region_pages.is_multiple_of(32) {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Waits until a committed checkpoint holds every linked page.
    fn checkpoint_region(&mut self) -> Result<(), RegionError> {
        if self.region_pages_checkpointed == self.region_pages {
            return Ok(());
        }
        match checkpointed::wait_until_checkpointed(CHECKPOINT, CLOCK, REGION_CHECKPOINT_US_MAX) {
            Ok(()) => {
                self.region_pages_checkpointed = self.region_pages;
                Ok(())
            }
            Err(checkpointed::WaitError::TimedOut) => {
                user::print("tp1: no checkpoint took the region's pages within 60 s (is the store large enough?)\n");
                Err(RegionError::Failed)
            }
            Err(checkpointed::WaitError::Failed(what, error)) => Err(failed(what, error)),
        }
    }
}

fn index() -> Index<'static> {
    // SAFETY: one thread; the index's statics are used only through the one `Index` made
    // here at a time, which never outlives the call that made it.
    unsafe {
        Index::new(
            &mut *core::ptr::addr_of_mut!(INDEX_SLOTS),
            &mut *core::ptr::addr_of_mut!(INDEX_COVERED),
            (*core::ptr::addr_of!(STATE)).index_key,
        )
    }
}

/// The clock's time in microseconds (0 if it does not answer).
fn clock_us() -> u64 {
    clock::now(CLOCK).map_or(0, |now| now.nanoseconds / 1000)
}

fn report(what: &[u8], code: u64) {
    let mut digits = [0u8; 20];
    user::print_parts(&[b"tp1: ", what, b" failed: code ", user::decimal(code, &mut digits), b"\n"]);
}

fn error_code(error: Error) -> u64 {
    match error {
        Error::Invocation(error) => error as u64,
        Error::Object(error) => error as u64,
        Error::Reply(code) => code,
    }
}

impl State {
    /// Reads the tokens page again: a token minted or revoked since counts from now.
    fn refresh_tokens(&mut self) {
        let mut page_bytes = [0u8; tokens::PAGE_BYTES];
        let read = page::read(TOKENS, 0, tokens::PAGE_BYTES as u64, &mut page_bytes);
        if read.is_err() {
            page_bytes = [0; tokens::PAGE_BYTES];
        }
        self.token_count = tokens::valid(&page_bytes, &mut self.tokens, &mut self.grants);
        self.counters.tokens = self.token_count as u64;
    }

    /// What `token` grants, if it is valid (for whichever service). The same comparisons,
    /// every valid token each, whatever the outcome.
    fn grant_of(&self, token: &Token) -> Option<tokens::Grant> {
        let mut valid = [Token([0; 16]); tokens::ENTRIES_MAX];
        for (slot, bytes) in valid.iter_mut().zip(&self.tokens) {
            *slot = Token(*bytes);
        }
        let index = protocol::token_index_constant_time(token, &valid[..self.token_count])?;
        Some(self.grants[index])
    }

    fn slot_of(&self, connection: u32) -> Option<usize> {
        self.connections.iter().position(|slot| slot.id == connection && connection != 0)
    }

    fn open(&mut self, connection: u32) {
        let free = self.connections.iter().position(|slot| slot.id == 0).or_else(|| {
            // Full: evict the connection quiet longest, if quiet long enough: a client that
            // opens connections and sends nothing, or a byte now and then, holds none for long.
            let (slot, quietest) =
                self.connections.iter().enumerate().min_by_key(|(_, slot)| slot.active_us)?;
            (self.now_us.saturating_sub(quietest.active_us) > QUIET_EVICT_US).then_some(slot)
        });
        let Some(slot) = free else {
            let _ = net::close(LISTENER, connection);
            return;
        };
        if self.connections[slot].id != 0 {
            let _ = net::close(LISTENER, self.connections[slot].id);
        }
        self.buffers[slot].decoder = RequestFrameDecoder::for_requests();
        let fresh = &mut self.connections[slot];
        fresh.id = connection;
        fresh.out_length = 0;
        fresh.closing = false;
        fresh.active_us = self.now_us;
        fresh.undecided = self.owner == tokens::Owner::Appliance;
        fresh.head_length = 0;
    }

    fn ended(&mut self, connection: u32) {
        if let Some(slot) = self.slot_of(connection) {
            self.connections[slot].closing = true;
        }
    }

    fn closed(&mut self, connection: u32) {
        if let Some(slot) = self.slot_of(connection) {
            self.connections[slot].id = 0;
        }
        let _ = net::close(LISTENER, connection);
    }

    /// Queues a reply frame on `slot`'s connection, if it is still `connection`.
    fn reply(&mut self, slot: usize, connection: u32, request_id: u64, payload: &ReplyPayload<'_>) {
        match payload {
            ReplyPayload::Transaction(_) => self.counters.transactions_total += 1,
            ReplyPayload::Error(status) => {
                if let Some(count) = self.counters.errors_total.get_mut(usize::from(status.code())) {
                    *count += 1;
                }
            }
            _ => {}
        }
        if self.connections[slot].id != connection || connection == 0 {
            return;
        }
        for attempt in 0..2 {
            let (target, buffers) = (&mut self.connections[slot], &mut self.buffers[slot]);
            match Reply::encode(&mut buffers.out[target.out_length..], request_id, payload) {
                Ok(length) => {
                    target.out_length += length;
                    return;
                }
                // Full: hand what waits to the network service and try once more.
                Err(_) if attempt == 0 => flush(target, buffers),
                // It does not read its replies: close it rather than let it hold memory.
                Err(_) => {
                    let _ = net::close(LISTENER, connection);
                    target.id = 0;
                }
            }
        }
    }

    fn data(&mut self, connection: u32, input: &[u8]) {
        let Some(slot) = self.slot_of(connection) else {
            return;
        };
        self.connections[slot].active_us = self.now_us;
        if !self.connections[slot].undecided {
            return self.decode(slot, connection, input);
        }
        let (target, buffers) = (&mut self.connections[slot], &mut self.buffers[slot]);
        let fits = target.head_length + input.len() <= HEAD_BYTES_MAX;
        if fits {
            buffers.head[target.head_length..target.head_length + input.len()].copy_from_slice(input);
            target.head_length += input.len();
            if !head_decides(&buffers.head[..target.head_length]) {
                return;
            }
        }
        // It sent more than can be handed over before its first token: a tenant's token in
        // it is refused here.
        target.undecided = false;
        let head = buffers.head;
        let head_length = target.head_length;
        // Only a first frame long enough to hold a token has one (a shorter one is refused
        // by the decoder here; the bytes after it are the next frame's).
        let announced = u32::from_le_bytes(head[..protocol::LENGTH_PREFIX_BYTES].try_into().expect("4 bytes"));
        let token = head
            .get(HEAD_TOKEN_END - 16..HEAD_TOKEN_END)
            .filter(|_| fits && head_length >= HEAD_TOKEN_END && announced as usize >= protocol::REQUEST_HEADER_BYTES);
        let grant = token.and_then(|token| self.grant_of(&Token(token.try_into().expect("16 bytes"))));
        if let Some(tokens::Grant { owner: tokens::Owner::Tenant(tenant), .. }) = grant {
            // A tenant with no service (none made, or revoked meanwhile) leaves the slot void
            // and the hand-over refused: the request is then refused here.
            let handed = node::fetch(ROUTES, u64::from(tenant), SCRATCH)
                .and_then(|()| net::hand_over(LISTENER, connection, SCRATCH, &head[..head_length]));
            match handed {
                Ok(()) => {
                    self.connections[slot].id = 0;
                    return;
                }
                // The tenant's service holds as many connections as the network service
                // lets it: `busy`, and closed, so that the client comes back later.
                Err(Error::Reply(net::error::TOO_MANY_CONNECTIONS)) => {
                    let request_id = u64::from_le_bytes(head[REQUEST_ID_AT..REQUEST_ID_AT + 8].try_into().expect("8 bytes"));
                    self.reply(slot, connection, request_id, &ReplyPayload::Error(Status::Busy));
                    self.connections[slot].closing = true;
                    return;
                }
                // Reset meanwhile: nobody is left to answer.
                Err(Error::Reply(net::error::UNKNOWN_CONNECTION)) => {
                    self.connections[slot].id = 0;
                    return;
                }
                Err(_) => {}
            }
        }
        self.decode(slot, connection, &head[..head_length]);
        if !fits {
            self.decode(slot, connection, input);
        }
    }

    /// Decodes `input`, the next bytes of `slot`'s `connection`, and answers the requests.
    fn decode(&mut self, slot: usize, connection: u32, mut input: &[u8]) {
        let mut body = [0u8; protocol::REQUEST_BODY_BYTES_MAX as usize];
        while !input.is_empty() && self.connections[slot].id == connection && !self.connections[slot].closing {
            let decoded = match self.buffers[slot].decoder.decode(&mut input) {
                Ok(Some(frame)) => {
                    body[..frame.len()].copy_from_slice(frame);
                    Ok(Some(frame.len()))
                }
                Ok(None) => Ok(None),
                Err(error) => Err(error),
            };
            match decoded {
                Ok(Some(length)) => self.request(slot, connection, &body[..length]),
                Ok(None) => {}
                Err(_) => {
                    self.reply(slot, connection, 0, &ReplyPayload::Error(Status::BadLength));
                    self.connections[slot].closing = true;
                }
            }
        }
    }

    fn request(&mut self, slot: usize, connection: u32, body: &[u8]) {
        let request = match Request::decode(body) {
            Ok(request) => request,
            Err(refused) => {
                return self.reply(slot, connection, refused.request_id, &ReplyPayload::Error(refused.status));
            }
        };
        let id = request.request_id;
        let needs_admin = matches!(request.operation, Operation::Load { .. });
        // An admin token is a client token too; a request that says it carries one, or
        // loads, needs one.
        let allowed = self.grant_of(&request.token).is_some_and(|grant| {
            grant.owner == self.owner
                && (grant.kind == tokens::Kind::Admin || !request.admin_token)
                && (request.admin_token || !needs_admin)
        });
        if !allowed {
            return self.reply(slot, connection, id, &ReplyPayload::Error(Status::BadToken));
        }
        let Some(view) = ledger_view(self.region_pages) else {
            let payload = match request.operation {
                Operation::Load { scale: wanted, .. } => self.load(wanted),
                _ => ReplyPayload::Error(Status::NotLoaded),
            };
            return self.reply(slot, connection, id, &payload);
        };
        let scale = view.scale();
        match request.operation {
            Operation::Transaction(transaction) => {
                if self.pending_count == PENDING_MAX {
                    return self.reply(slot, connection, id, &ReplyPayload::Error(Status::Busy));
                }
                self.pending[self.pending_count] = Pending {
                    slot: slot as u16,
                    connection,
                    request_id: id,
                    transaction: ledger::Transaction {
                        id: transaction.transaction_id.0,
                        branch: transaction.branch,
                        teller: transaction.teller,
                        account: transaction.account,
                        delta: transaction.delta,
                    },
                };
                self.pending_count += 1;
            }
            Operation::Balance { account } => {
                let payload = match (scale, view.rows().2) {
                    (0, _) => ReplyPayload::Error(Status::NotLoaded),
                    (_, accounts) if account >= accounts => ReplyPayload::Error(Status::BadArgument),
                    _ => ReplyPayload::Balance { balance: view.balance(Table::Accounts, account) },
                };
                self.reply(slot, connection, id, &payload);
            }
            Operation::Summary => {
                if scale == 0 {
                    return self.reply(slot, connection, id, &ReplyPayload::Error(Status::NotLoaded));
                }
                let sums = view.summary();
                let mut branches = [BranchSums::default(); protocol::SCALE_MAX as usize];
                let mut totals = SummaryTotals { history_count: view.history_count(), ..SummaryTotals::default() };
                for (out, sums) in branches.iter_mut().zip(&sums).take(scale as usize) {
                    *out = BranchSums { accounts: sums.accounts, tellers: sums.tellers, branch: sums.branch, history: sums.history };
                    totals.accounts_total += sums.accounts;
                    totals.tellers_total += sums.tellers;
                    totals.branches_total += sums.branch;
                    totals.history_total += sums.history;
                }
                let payload = ReplyPayload::Summary { totals, branches: &branches[..scale as usize] };
                self.reply(slot, connection, id, &payload);
            }
            Operation::History { from_index, count_max } => {
                let end = view.history_count().min(from_index.saturating_add(u64::from(count_max)));
                let mut records = [HistoryRecord {
                    transaction_id: TransactionId([0; 16]),
                    branch: 0,
                    teller: 0,
                    account: 0,
                    delta: 0,
                    time_us: 0,
                }; protocol::HISTORY_COUNT_MAX as usize];
                let mut count = 0;
                for index in from_index..end {
                    let record = view.history(index);
                    records[count] = HistoryRecord {
                        transaction_id: TransactionId(record.id),
                        branch: record.branch,
                        teller: record.teller,
                        account: record.account,
                        delta: record.delta,
                        time_us: record.time_us as i64,
                    };
                    count += 1;
                }
                self.reply(slot, connection, id, &ReplyPayload::History { records: &records[..count] });
            }
            Operation::Load { scale: wanted, replace: _ } => {
                let payload = if scale != 0 { ReplyPayload::Error(Status::Busy) } else { self.load(wanted) };
                self.reply(slot, connection, id, &payload);
            }
        }
    }

    /// A load: the region's pages for `scale` bought and checkpointed if they are not yet,
    /// then its header written. Replacing loaded data is refused (busy): a store holds one
    /// database; format a fresh store for a fresh one.
    fn load(&mut self, scale: u32) -> ReplyPayload<'static> {
        if !(1..=ledger::SCALE_MAX).contains(&scale) {
            return ReplyPayload::Error(Status::BadArgument);
        }
        let ready = self.build_region(ledger::region_bytes(scale) / PAGE_BYTES).and_then(|()| self.checkpoint_region());
        match ready {
            Ok(()) => {}
            Err(RegionError::NoSpace) => return ReplyPayload::Error(Status::NoSpace),
            Err(RegionError::Failed) => return ReplyPayload::Error(Status::Internal),
        }
        let Some(view) = ledger_view(self.region_pages) else {
            return ReplyPayload::Error(Status::Internal);
        };
        let write = match ledger::load(&view, scale, REGION_ADDRESS) {
            Ok(write) => write,
            Err(refusal) => return ReplyPayload::Error(status_of(refusal)),
        };
        match journal::write(JOURNAL, SPACE, REGION_ADDRESS + write.guard_offset, write.guard_expected, write.pieces()) {
            Ok(_) => ReplyPayload::Loaded,
            Err(Error::Object(ObjectError::Changed)) => ReplyPayload::Error(Status::Busy),
            Err(error) => {
                report(b"journal write (load)", error_code(error));
                ReplyPayload::Error(Status::Internal)
            }
        }
    }

    /// Runs the pending transactions in batches, each one guarded write, and queues their
    /// replies once each batch is durable.
    fn run_pending(&mut self) {
        let mut start = 0;
        let mut attempts = 0;
        while start < self.pending_count {
            let mut outcomes = [Err(Status::Internal); 64];
            let mut taken = 0;
            let write = {
                let Some(view) = ledger_view(self.region_pages) else {
                    for position in start..self.pending_count {
                        let pending = self.pending[position];
                        let payload = ReplyPayload::Error(Status::NotLoaded);
                        self.reply(usize::from(pending.slot), pending.connection, pending.request_id, &payload);
                    }
                    break;
                };
                let mut index = index();
                let guard = index.catch_up(&view);
                let mut batch = Batch::new(&view, guard, self.now_us);
                for pending in &self.pending[start..self.pending_count] {
                    let outcome = match index.find(&view, &pending.transaction.id) {
                        Some(outcome) => Ok(outcome),
                        None => match batch.add(&view, &pending.transaction) {
                            Ok(Added::Applied(outcome) | Added::Repeated(outcome)) => Ok(outcome),
                            Ok(Added::Full) => break,
                            Err(refusal) => Err(status_of(refusal)),
                        },
                    };
                    outcomes[taken] = outcome.map(|outcome| TransactionResult {
                        account_balance: outcome.balance,
                        history_index: outcome.history_index,
                    });
                    taken += 1;
                    if taken == outcomes.len() {
                        break;
                    }
                }
                (!batch.is_empty()).then(|| batch.write(REGION_ADDRESS))
            };
            if let Some(write) = write {
                let before = clock::now(CLOCK).map_or(0, |now| now.nanoseconds);
                let written = journal::write(
                    JOURNAL,
                    SPACE,
                    REGION_ADDRESS + write.guard_offset,
                    write.guard_expected,
                    write.pieces(),
                );
                match written {
                    Ok(_) => {
                        let after = clock::now(CLOCK).map_or(before, |now| now.nanoseconds);
                        self.counters.commit_took(after.saturating_sub(before));
                    }
                    // A restart brought back this computation from before commits made
                    // after it: compute the batch again from the region as it is.
                    Err(Error::Object(ObjectError::Changed)) if attempts < WRITE_ATTEMPTS_MAX => {
                        attempts += 1;
                        continue;
                    }
                    Err(error) => {
                        report(b"journal write", error_code(error));
                        outcomes[..taken].fill(Err(Status::Internal));
                    }
                }
            }
            attempts = 0;
            for (position, outcome) in (start..start + taken).zip(outcomes) {
                let pending = self.pending[position];
                let payload = match outcome {
                    Ok(result) => ReplyPayload::Transaction(result),
                    Err(status) => ReplyPayload::Error(status),
                };
                self.reply(usize::from(pending.slot), pending.connection, pending.request_id, &payload);
            }
            start += taken;
        }
        self.pending_count = 0;
    }

    /// Hands each connection's waiting replies to the network service.
    fn flush(&mut self) {
        for (connection, buffers) in self.connections.iter_mut().zip(&mut self.buffers) {
            flush(connection, buffers);
        }
    }
}

/// Hands `connection`'s waiting replies to the network service, as much as it takes; closes
/// it once they are out if it is closing.
fn flush(connection: &mut Connection, buffers: &mut Buffers) {
    if connection.id == 0 {
        return;
    }
    let mut sent = 0;
    while sent < connection.out_length {
        let end = connection.out_length.min(sent + net::WAIT_BYTES_MAX);
        match net::send(LISTENER, connection.id, &buffers.out[sent..end]) {
            Ok(0) => break,
            Ok(taken) => sent += taken,
            Err(_) => {
                connection.id = 0;
                break;
            }
        }
    }
    buffers.out.copy_within(sent..connection.out_length, 0);
    connection.out_length -= sent;
    if connection.id != 0 && connection.closing && connection.out_length == 0 {
        let _ = net::close(LISTENER, connection.id);
        connection.id = 0;
    }
}

/// Whether a connection's first bytes, `head`, say which service it is for: they hold its
/// first request's token, or its first frame ends, or cannot be framed, before the token
/// would (then it is the appliance's, whose decoder answers it at once, as for any client).
fn head_decides(head: &[u8]) -> bool {
    let Some(prefix) = head.first_chunk::<{ protocol::LENGTH_PREFIX_BYTES }>() else {
        return false;
    };
    let announced = u32::from_le_bytes(*prefix);
    head.len() >= HEAD_TOKEN_END
        || !(protocol::REQUEST_BODY_BYTES_MIN..=protocol::REQUEST_BODY_BYTES_MAX).contains(&announced)
        || head.len() >= protocol::LENGTH_PREFIX_BYTES + announced as usize
}

fn status_of(refusal: Refusal) -> Status {
    match refusal {
        Refusal::NotLoaded => Status::NotLoaded,
        Refusal::BadArgument => Status::BadArgument,
        Refusal::Busy => Status::Busy,
    }
}

/// A tenant's instance: waits for the admin service's one message
/// (`holdfast_tp1_ledger::instance::CONFIGURE`), which brings its listener, its bank, its
/// counters page and its tokens page into their registers, and answers it. Returns the
/// tenant's compartment number.
fn configure() -> Option<u8> {
    use ledger::instance::{BAD_CONFIGURATION, CONFIGURE};
    // The register is void at the start: a return through it only waits.
    let message = user::Invocation::return_to(CONFIGURATION_RESUME, 0, [0; 4])
        .receiving(&[LISTENER.index(), BANK.index(), COUNTERS.index(), TOKENS.index()])
        .resume_into(CONFIGURATION_RESUME)
        .invoke(&mut []);
    let tenant = u8::try_from(message.words[0]).ok().filter(|&tenant| tenant != u8::MAX);
    // The listener is tried by the first wait (identify would call it: it is a start
    // capability of the network service). Without a tokens page of its own it would serve
    // nobody: refused, so that the admin service says so.
    let tokens_page = identify(TOKENS).is_ok_and(|identity| identity.type_code == Type::Page as u64);
    let configured = message.code == CONFIGURE && tenant.is_some() && tokens_page;
    let answer = if configured { 0 } else { BAD_CONFIGURATION };
    user::syscall::invoke(user::syscall::Invocation {
        kind: user::syscall::Kind::Send,
        ..user::syscall::Invocation::call(CapReg::new(CONFIGURATION_RESUME), answer)
    });
    if !configured {
        user::print("tp1: a tenant's service was sent no configuration; stopping\n");
        return None;
    }
    tenant
}

fn main() -> u64 {
    // SAFETY: `main` runs once, on the program's only thread: the only reference.
    let state = unsafe { &mut *core::ptr::addr_of_mut!(STATE) };
    // A tenant's instance runs on a copy-on-write copy of the program's space
    // (services/virtual-copy): its tree, whose root is its own, is the keeper node's slot 0.
    let own_tree = process::fetch_space(OWN_PROCESS, SPACE).and_then(|()| match space::info(SPACE) {
        Ok(shape) if shape.flags & user::abi::methods::space_flags::KEEPER != 0 => space::fetch(SPACE, 0, SPACE),
        Ok(_) => Ok(()),
        Err(error) => Err(error),
    });
    if let Err(error) = own_tree {
        report(b"fetch_space", error_code(error));
        return 1;
    }
    if state.index_key == [0, 0] {
        match user::random::words::<2>() {
            Ok(key) => state.index_key = key,
            Err(error) => {
                user::print_parts(&[b"tp1: ", error.message().as_bytes(), b" for the index's key; stopping\n"]);
                return 1;
            }
        }
    }
    // The routes node is the appliance's service's; an instance starts with none.
    if identify(ROUTES).is_ok() {
        if let Err(error) = net::listen(NETWORK, PORT, LISTENER) {
            report(b"listen on 7100", error_code(error));
            return 1;
        }
        user::print("tp1: serving on 7100\n");
    } else {
        let Some(tenant) = configure() else {
            return 1;
        };
        state.owner = tokens::Owner::Tenant(tenant);
        let mut digits = [0u8; 20];
        user::print_parts(&[b"tp1: serving tenant ", user::decimal(u64::from(tenant), &mut digits), b"\n"]);
    }
    // Counted from the start, before anything comes (then after each round of work).
    state.refresh_tokens();
    let _ = page::write(COUNTERS, 0, &state.counters.encode());
    loop {
        let length = match net::wait(LISTENER, &mut state.events) {
            Ok(length) => length,
            Err(Error::Reply(net::error::LISTENER_SHUT)) => {
                user::print("tp1: its listener was shut (its tenant revoked); stopping\n");
                return 0;
            }
            Err(error) => {
                report(b"wait", error_code(error));
                return 1;
            }
        };
        state.now_us = clock_us();
        state.refresh_tokens();
        let events = state.events;
        for event in net::events(&events[..length]) {
            match event.kind {
                net::event::OPENED => state.open(event.connection),
                net::event::DATA => state.data(event.connection, event.data),
                net::event::CLOSED => state.closed(event.connection),
                // A client that shut its side after its last request: its replies (this
                // round's, all of them: `run_pending` answers every request decoded) go
                // out, then the connection is closed.
                net::event::ENDED => state.ended(event.connection),
                // Room for replies the network service could not take: the flush below.
                net::event::WRITABLE => {}
                _ => {}
            }
        }
        state.run_pending();
        state.flush();
        state.counters.connections_open = state.connections.iter().filter(|slot| slot.id != 0).count() as u64;
        let _ = page::write(COUNTERS, 0, &state.counters.encode());
    }
}

user::entry!(main);
