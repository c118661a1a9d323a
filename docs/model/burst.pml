/*
 * The burst protocol of burstbot (DESIGN.md §3) as a Promela model for Spin.
 * docs/model/README.md says what is modelled, what is not, and how to run and read it.
 *
 * World: one conversation; a user who sends up to NMSG messages (the platform may deliver one
 * twice); NW worker processes, each with a generation side (Gen) and a delivery side (Del) that
 * crash and restart together; a Chaos process that crashes workers and lets leases and claims
 * expire; a platform that counts every post it receives.
 *
 * Each database statement is one atomic step mirroring a named query in storage/*.sql. A
 * compare-and-swap that would match no row changes nothing, so it is a step only when it matches
 * (a failed attempt is a stutter).
 *
 * Time is abstract. The debounce timer is due whenever it exists. A lease or a claim expires in
 * one Chaos step:
 *   - for free when its holder no longer works on it (crashed, or gave up);
 *   - when its holder still works on it, only as one of MAXSTALL stalls (a holder paused past its
 *     TTL). A stalled lease holder may be anywhere. A stalled claim holder is never inside the
 *     posting window (from its claim until its last post has reached the platform): Slack has
 *     no conditional post, so delivery relies on a deliverer that renews every ttl/3 not pausing
 *     for the rest of a TTL while it has a post to send, and on Slack showing a received post
 *     within a TTL. A crashed deliverer's post in flight lands or is lost at the crash.
 *
 * Mutants (one -D at a time; each must produce a counterexample):
 *   MUTANT_FENCING      final check + commit without `lease_token = :token`
 *   MUTANT_FINAL_CHECK  final check + commit without `(version = V OR :deadline_passed)`
 *   MUTANT_CLAIM_TOKEN  mark_sent / mark_retry / mark_failed and the claim renewal without
 *                       `claim_token = :token`
 *   MUTANT_OLD_DELIVERY the delivery before the fix: no claim token and no renewal, so a slow
 *                       post outlives the claim; mark_retry on the owner, the other marks on
 *                       the state only
 *   MUTANT_TIMER        the commit deletes the timer even when newer input armed it
 *   MUTANT_LONG_PAUSE   the fixed protocol without the timing assumption: a paused deliverer
 *                       may lose its claim inside the posting window
 */

#ifndef NMSG
#define NMSG     3   /* user messages (distinct platform ids); also the most outbox rows */
#endif
#ifndef MAXCRASH
#define MAXCRASH 1   /* worker crashes (the process restarts at once, its local state lost) */
#endif
#ifndef MAXSTALL
#define MAXSTALL 1   /* leases or claims lost by a holder that still works on them */
#endif
#ifndef MAXATT
#define MAXATT   2   /* claims of a reply that may end in mark_retry (bounds the search) */
#endif
#define NW       2   /* worker processes (the Gen/Del/crash steps are written out for two) */
#define NPART    2   /* parts of a reply */

/* reply states */
#define PENDING 1
#define SENT    2
#define FAILED  3

/* Gen program counter */
#define G_IDLE    0
#define G_NOTHING 1   /* lease taken, nothing pending: drop the timer */
#define G_GEN     2   /* generating */
#define G_RELEASE 3   /* release the lease */

/* Del program counter */
#define D_IDLE     0
#define D_INFLIGHT 1   /* a post is on its way; a read-back does not show it yet */
#define D_ERR      2   /* the post raised: mark_retry or mark_failed */
#define D_SENT     3   /* every part posted: mark_sent */

/* conversations row */
byte version;            /* accepted messages; message seq = version at arrival */
byte answered;           /* answered_version */
byte lease_owner;        /* 0 = NULL, else worker + 1 */
byte lease_token;        /* the fencing token, only increases */
bool lease_expired;      /* lease_expires_at < now */

/* debounce_timers row */
bool timer;
byte armed;              /* armed_version */

/* messages: which platform ids are stored */
bool stored[NMSG];

/* replies (the outbox), indexed by commit order */
byte nrows;
byte npending;
byte r_to[NMSG];         /* covers_to_version = V */
byte r_seen[NMSG];       /* the burst its text answered: (r_seen, r_to] */
bool r_stale[NMSG];      /* committed while newer input existed and the deadline had not passed */
byte r_state[NMSG];
byte r_owner[NMSG];      /* claim_owner: 0 = NULL, else worker + 1 */
byte r_claims[NMSG];     /* claim_token: +1 per claim (attempts count failures: not modelled) */
bool r_expired[NMSG];    /* claim_expires_at < now */

/* the platform, raw: posts received per (row, part); per message, the row whose post first
   covered it */
byte posts[NMSG * NPART];
byte covered_by[NMSG + 1];

/* worker-local state, lost on a crash (global so that a crash can reset it) */
byte g_pc[NW], g_tok[NW], g_V[NW], g_ans[NW];
byte d_pc[NW], d_row[NW], d_tok[NW], d_part[NW];
byte d_have[NW];         /* bit p: the read-back found part p on the platform */
bool d_renew_failed[NW];

/* fault budgets */
byte crashes, stalls;

/* scratch inside atomic steps, not part of the state */
hidden byte h_r, h_i, h_s, h_dl;
hidden byte G1_no_message_covered_twice;
hidden byte G3_no_reply_missed_input;
hidden byte G9_replies_in_commit_order;

/* G2: from some point on, every accepted message is answered and every reply is sent or
   failed for good (a logged skip). Checked by an acceptance-cycle search (pan -a). */
#define settled (answered == version && npending == 0)
ltl G2_every_message_covered { <> [] settled }

#if defined(MUTANT_FENCING)
#define FENCE(w) true
#else
#define FENCE(w) (lease_token == g_tok[w])
#endif

#if defined(MUTANT_FINAL_CHECK)
#define CURRENT(w) true
#else
#define CURRENT(w) (version == g_V[w] || h_dl)
#endif

#if defined(MUTANT_CLAIM_TOKEN) || defined(MUTANT_OLD_DELIVERY)
#define CLAIM_FENCE(w, r) true
#else
#define CLAIM_FENCE(w, r) (r_claims[r] == d_tok[w])
#endif

#if defined(MUTANT_OLD_DELIVERY)
#define RETRY_FENCE(w, r) (r_owner[r] == w + 1)
#else
#define RETRY_FENCE(w, r) CLAIM_FENCE(w, r)
#endif

#if defined(MUTANT_TIMER)
#define TIMER_COVERED(w) true
#else
#define TIMER_COVERED(w) (armed <= g_V[w])
#endif

/* the holder still works on it */
#define lease_held(w)    (g_pc[w] != G_IDLE && g_tok[w] == lease_token)
#define claim_held(w, r) (d_pc[w] != D_IDLE && d_row[w] == r && d_tok[w] == r_claims[r])
#if defined(MUTANT_OLD_DELIVERY) || defined(MUTANT_LONG_PAUSE)
#define posting(w) false
#else
#define posting(w) (d_pc[w] == D_INFLIGHT)
#endif

/* ---------------------------------------------------------------------------------------------
 * 1. Arrival: insert_message (a stored platform id changes nothing), bump_version, arm_timer.
 */
inline ingest(k) {
  if
  :: !stored[k] ->
     stored[k] = true;
     version++;
     timer = true;
     armed = version;
     printf("ingest: message %d accepted, version %d, timer armed\n", k + 1, version)
  :: else ->
     printf("ingest: message %d again: duplicate, nothing changes\n", k + 1)
  fi
}

/* The user sends NMSG messages in order and may stop at any point. The platform may deliver
   the previous message again; a redelivery changes nothing, so when it comes does not matter
   and it rides along with the next step. */
proctype User() {
  byte next;
end:
  do
  :: atomic { next < NMSG ->
       if
       :: next > 0 -> ingest(next - 1)
       :: skip
       fi;
       ingest(next);
       next++ }
  :: break
  od
}

/* ---------------------------------------------------------------------------------------------
 * 2-5. Timer, lease, collect, generate, final check + commit.
 */
inline gen_reset(w) {
  g_pc[w] = G_IDLE; g_tok[w] = 0; g_V[w] = 0; g_ans[w] = 0
}

/* final_check, insert_reply, drop_timer / restart_cap: one transaction */
inline commit(w) {
  /* UNIQUE (conversation_id, covers_to_version) */
  h_s = 0; h_r = 0;
  do
  :: h_s < nrows -> if :: r_to[h_s] == g_V[w] -> h_r = 1 :: else fi; h_s++
  :: else -> break
  od;
  if
  :: FENCE(w) && answered < g_V[w] && CURRENT(w) && !h_r ->
     h_r = nrows;
     nrows++;
     npending++;
     r_to[h_r] = g_V[w];
     r_seen[h_r] = g_ans[w];
     r_stale[h_r] = (version != g_V[w] && !h_dl);
     r_state[h_r] = PENDING;
     answered = g_V[w];
     lease_owner = 0;
     lease_expired = false;
     printf("%c: committed reply %d for burst (%d, %d] (version %d, deadline passed %d)\n",
            65 + w, h_r + 1, g_ans[w], g_V[w], version, h_dl);
     if
     :: timer && TIMER_COVERED(w) -> timer = false
     :: else   /* newer input keeps its timer (restart_cap) */
     fi;
     gen_reset(w)
  :: else ->
     printf("%c: final check refused burst (%d, %d]: discarded\n", 65 + w, g_ans[w], g_V[w]);
     g_pc[w] = G_RELEASE
  fi;
  h_dl = 0; h_r = 0; h_s = 0
}

proctype Gen(byte w) {
end:
  do
  /* 2. Timer due: acquire_lease / take_over_lease. 3. Collect: V and answered_version come
     back from the same statement; pending = (answered, V]. */
  :: d_step { g_pc[w] == G_IDLE && timer && (lease_owner == 0 || lease_expired) ->
       lease_owner = w + 1;
       lease_token++;
       lease_expired = false;
       g_tok[w] = lease_token;
       g_V[w] = version;
       g_ans[w] = answered;
       printf("%c: lease token %d, burst (%d, %d]\n", 65 + w, lease_token, answered, version);
       if
       :: g_V[w] <= g_ans[w] -> g_pc[w] = G_NOTHING
       :: else -> g_pc[w] = G_GEN
       fi }
  /* nothing pending: drop_timer (armed_version <= V), then release */
  :: d_step { g_pc[w] == G_NOTHING ->
       if
       :: timer && armed <= g_V[w] -> timer = false
       :: else
       fi;
       g_pc[w] = G_RELEASE }
  /* 4. Generating. renew_lease: a step only when it changes something */
  :: d_step { g_pc[w] == G_GEN && (lease_token != g_tok[w] || lease_owner == 0 || lease_expired) ->
       if
       :: lease_token == g_tok[w] && lease_owner != 0 ->
          lease_expired = false;
          printf("%c: lease renewed\n", 65 + w)
       :: else ->
          printf("%c: lease renewal failed: generation aborted\n", 65 + w);
          gen_reset(w)
       fi }
  /* newer input before the deadline: cancel, then release */
  :: d_step { g_pc[w] == G_GEN && version > g_V[w] ->
       printf("%c: version %d > %d: generation cancelled\n", 65 + w, version, g_V[w]);
       g_pc[w] = G_RELEASE }
  /* 5. Generation done: final check + commit. Whether the deadline has passed is the worker's
     reading of the clock; it matters only when newer input exists. */
  :: atomic { g_pc[w] == G_GEN ->
       if
       :: version != g_V[w] -> h_dl = 1
       :: version != g_V[w] -> h_dl = 0
       :: else -> h_dl = 0
       fi;
       d_step { commit(w) } }
  /* release_lease: conditional on the token */
  :: d_step { g_pc[w] == G_RELEASE ->
       if
       :: lease_token == g_tok[w] && lease_owner != 0 -> lease_owner = 0; lease_expired = false
       :: else
       fi;
       gen_reset(w) }
  od
}

/* ---------------------------------------------------------------------------------------------
 * 6. Delivery from the outbox.
 */
inline del_reset(w) {
  d_pc[w] = D_IDLE; d_row[w] = 0; d_tok[w] = 0; d_part[w] = 0; d_have[w] = 0;
  d_renew_failed[w] = false
}

/* The platform receives part d_part[w] of reply d_row[w]: check G1, G3 and G9 on what it has
   received, raw. */
inline land(w) {
  h_r = d_row[w];
  printf("platform: received reply %d part %d\n", h_r + 1, d_part[w] + 1);
  G1_no_message_covered_twice = (posts[h_r * NPART + d_part[w]] == 0);
  h_s = r_seen[h_r] + 1;
  do
  :: h_s <= r_to[h_r] ->
     G1_no_message_covered_twice = G1_no_message_covered_twice &&
         (covered_by[h_s] == 0 || covered_by[h_s] == h_r + 1);
     covered_by[h_s] = h_r + 1;
     h_s++
  :: else -> break
  od;
  assert(G1_no_message_covered_twice);
  G3_no_reply_missed_input = !r_stale[h_r];
  assert(G3_no_reply_missed_input);
  /* earlier replies complete (or failed for good), later ones not started */
  G9_replies_in_commit_order = true;
  h_s = 0;
  do
  :: h_s < nrows ->
     h_i = 0;
     do
     :: h_i < NPART ->
        if
        :: h_s < h_r && r_state[h_s] != FAILED ->
           G9_replies_in_commit_order = G9_replies_in_commit_order && posts[h_s * NPART + h_i] > 0
        :: h_s > h_r ->
           G9_replies_in_commit_order = G9_replies_in_commit_order && posts[h_s * NPART + h_i] == 0
        :: else
        fi;
        h_i++
     :: else -> break
     od;
     h_s++
  :: else -> break
  od;
  assert(G9_replies_in_commit_order);
  posts[h_r * NPART + d_part[w]]++;
  h_r = 0; h_i = 0; h_s = 0
}

/* Skip the parts the read-back found; post the next one unless a renewal failed (then stop
   before it); after the last part, mark_sent. */
inline next_part(w) {
  do
  :: d_part[w] < NPART && (d_have[w] & (1 << d_part[w])) -> d_part[w]++
  :: else -> break
  od;
  if
  :: d_part[w] == NPART -> d_pc[w] = D_SENT
  :: else ->
     if
     :: d_renew_failed[w] ->
        printf("%c: claim lost: stops before part %d\n", 65 + w, d_part[w] + 1);
        del_reset(w)
     :: else ->
        printf("%c: posts reply %d part %d\n", 65 + w, d_row[w] + 1, d_part[w] + 1);
        d_pc[w] = D_INFLIGHT
     fi
  fi
}

/* The claim and claim-expiry steps are written out per row: rows 0 .. 2 (NMSG <= 3). */
#define earlier_done(r) \
  (((r) < 1 || r_state[0] != PENDING) && ((r) < 2 || r_state[1] != PENDING))
#define claimable(r) \
  ((r) < nrows && r_state[r] == PENDING && (r_owner[r] == 0 || r_expired[r]) && earlier_done(r))

/* claim_reply; a redelivery (attempt > 1) first reads back the parts the platform shows with
   this reply's idempotency key (a post in flight does not show yet) */
inline claim(w, r) {
  r_owner[r] = w + 1;
  r_claims[r]++;
  r_expired[r] = false;
  d_row[w] = r;
  d_tok[w] = r_claims[r];
  d_part[w] = 0;
  if
  :: r_claims[r] > 1 ->
     h_i = 0;
     do
     :: h_i < NPART ->
        if
        :: posts[r * NPART + h_i] > 0 -> d_have[w] = d_have[w] | (1 << h_i)
        :: else
        fi;
        h_i++
     :: else -> break
     od;
     h_i = 0;
     printf("%c: claimed reply %d (token %d); the read-back shows part 1: %d, part 2: %d\n",
            65 + w, r + 1, r_claims[r], d_have[w] & 1, d_have[w] >> 1)
  :: else ->
     printf("%c: claimed reply %d (token %d)\n", 65 + w, r + 1, r_claims[r])
  fi;
  next_part(w)
}

inline mark_retry(w) {
  h_r = d_row[w];
  if
  :: RETRY_FENCE(w, h_r) && r_state[h_r] == PENDING ->
     r_owner[h_r] = 0; r_expired[h_r] = false;
     printf("%c: mark_retry reply %d\n", 65 + w, h_r + 1)
  :: else ->
     printf("%c: mark_retry reply %d changed nothing\n", 65 + w, h_r + 1)
  fi;
  h_r = 0;
  del_reset(w)
}

inline mark_failed(w) {
  h_r = d_row[w];
  if
  :: CLAIM_FENCE(w, h_r) && r_state[h_r] == PENDING ->
     r_state[h_r] = FAILED; r_owner[h_r] = 0; r_expired[h_r] = false; npending--;
     printf("%c: mark_failed reply %d\n", 65 + w, h_r + 1)
  :: else ->
     printf("%c: mark_failed reply %d changed nothing\n", 65 + w, h_r + 1)
  fi;
  h_r = 0;
  del_reset(w)
}

proctype Del(byte w) {
end:
  do
  :: d_step { d_pc[w] == D_IDLE && claimable(0) -> claim(w, 0) }
  :: d_step { d_pc[w] == D_IDLE && claimable(1) -> claim(w, 1) }
  :: d_step { d_pc[w] == D_IDLE && claimable(2) -> claim(w, 2) }
  /* the post's outcome: it lands and returns; it lands but the call fails (a timeout); it fails */
  :: atomic { d_pc[w] == D_INFLIGHT ->
       if
       :: d_step { land(w); d_part[w]++; next_part(w) }
       :: d_step { land(w); printf("%c: the post raised after it landed\n", 65 + w); d_pc[w] = D_ERR }
       :: d_step { printf("%c: the post failed\n", 65 + w); d_pc[w] = D_ERR }
       fi }
#if !defined(MUTANT_OLD_DELIVERY)
  /* while a post is on its way: renew the claim (a step only when it changes something) */
  :: d_step { d_pc[w] == D_INFLIGHT && !d_renew_failed[w] &&
              (!CLAIM_FENCE(w, d_row[w]) || r_state[d_row[w]] != PENDING || r_expired[d_row[w]]) ->
       if
       :: CLAIM_FENCE(w, d_row[w]) && r_state[d_row[w]] == PENDING -> r_expired[d_row[w]] = false
       :: else ->
          printf("%c: claim renewal failed\n", 65 + w);
          d_renew_failed[w] = true
       fi }
#endif
  /* mark_retry (releases the claim; next_attempt_at is abstract) while fewer than MAXATT claims,
     or mark_failed at any time: a permanent error, or the give-up horizon ran out */
  :: atomic { d_pc[w] == D_ERR ->
       if
       :: d_tok[w] < MAXATT -> d_step { mark_retry(w) }
       :: d_step { mark_failed(w) }
       fi }
  /* mark_sent */
  :: d_step { d_pc[w] == D_SENT ->
       h_r = d_row[w];
       if
       :: CLAIM_FENCE(w, h_r) && r_state[h_r] == PENDING ->
          r_state[h_r] = SENT; r_owner[h_r] = 0; r_expired[h_r] = false; npending--;
          printf("%c: mark_sent reply %d\n", 65 + w, h_r + 1)
       :: else ->
          printf("%c: mark_sent reply %d changed nothing\n", 65 + w, h_r + 1)
       fi;
       h_r = 0;
       del_reset(w) }
  od
}

/* ---------------------------------------------------------------------------------------------
 * Faults: crashes and expiry.
 */
#define busy(w) (g_pc[w] != G_IDLE || d_pc[w] != D_IDLE)

inline crash(w) {
  crashes++;
  printf("%c: crash and restart\n", 65 + w);
  if
  :: d_pc[w] == D_INFLIGHT ->
     if
     :: d_step { land(w) }
     :: skip
     fi
  :: else
  fi;
  gen_reset(w);
  del_reset(w)
}

#define claim_holder(r) (r_owner[r] - 1)
#define can_expire(r) \
  ((r) < nrows && r_state[r] == PENDING && r_owner[r] != 0 && !r_expired[r] && \
   (!claim_held(claim_holder(r), r) || (!posting(claim_holder(r)) && stalls < MAXSTALL)))

inline expire_claim(r) {
  if
  :: claim_held(claim_holder(r), r) ->
     stalls++;
     printf("%c: its claim on reply %d expires while it still works on it\n",
            65 + claim_holder(r), r + 1)
  :: else ->
     printf("claim on reply %d expired\n", r + 1)
  fi;
  r_expired[r] = true
}

proctype Chaos() {
end:
  do
  /* a busy worker process crashes and restarts at once; its lease and claim stay until they
     expire */
  :: atomic { crashes < MAXCRASH && busy(0) -> crash(0) }
  :: atomic { crashes < MAXCRASH && busy(1) -> crash(1) }
  /* the lease expires */
  :: d_step { lease_owner != 0 && !lease_expired &&
              (!lease_held(lease_owner - 1) || stalls < MAXSTALL) ->
       if
       :: lease_held(lease_owner - 1) ->
          stalls++;
          printf("%c: its lease (token %d) expires while it still works on it\n",
                 65 + lease_owner - 1, lease_token)
       :: else ->
          printf("lease token %d expired\n", lease_token)
       fi;
       lease_expired = true }
  /* a claim expires */
  :: d_step { can_expire(0) -> expire_claim(0) }
  :: d_step { can_expire(1) -> expire_claim(1) }
  :: d_step { can_expire(2) -> expire_claim(2) }
  od
}

init {
  atomic {
    run User();
    run Gen(0); run Del(0);
    run Gen(1); run Del(1);
    run Chaos()
  }
}
