/*
 * The burst protocol of burstbot as a Promela model for Spin: ingest, the debounce timer, the
 * lease, the final check and commit, the outbox claim and delivery, shutdown, (with
 * -DSTREAMING) the streamed draft, on Discord (-DDISCORD) with its nonce window, and (with
 * -DSTREAMING -DSTOP) a person's Stop click on the draft.
 * docs/model/README.md says what is modelled, what is not, and how to run and read it.
 *
 * World: one conversation; a user who sends up to NMSG messages (the platform may deliver one
 * twice); NW worker processes, each with a generation side (Gen) and a delivery side (Del) that
 * crash and restart together; a Chaos process that crashes workers, lets leases and claims
 * expire, cuts a deliverer off from the database, lands or loses orphaned draft posts and plays
 * a person who deletes a draft; a platform that counts every post it receives; with -DSTOP, a
 * Person who presses Stop on a draft (two clicks, the first delivered twice).
 *
 * Each database statement is one atomic step mirroring a named query in storage/*.sql. A
 * compare-and-swap that would match no row changes nothing, so it is a step only when it matches
 * (a failed attempt is a stutter).
 *
 * Time is abstract. The debounce timer is due whenever it exists. A lease or a claim expires in
 * one Chaos step:
 *   - for free when its holder no longer works on it (crashed, or gave up);
 *   - when its holder still works on it, only as one of MAXSTALL stalls (a holder paused past its
 *     TTL, or cut off from the database). A stalled lease holder may be anywhere, but its
 *     platform calls (draft posts, look-ups, deletes) end with its lease fence. A stalled claim
 *     holder is never inside the posting window (from its claim until its last post has reached
 *     the platform): Slack has no conditional post, so delivery relies on a deliverer that renews
 *     every ttl/3 not pausing for the rest of a TTL while it has a post to send, and on Slack
 *     showing a received post within a TTL. A crashed deliverer's post in flight lands or is lost
 *     at the crash. A deliverer cut off from the database while a post is on its way sees that
 *     post land, cannot renew, and its fence ends before the claim expires: it stops before the
 *     next part.
 *   - A draft's look-up by key proves absence only once an earlier post with that key could have
 *     shown (created_at + lease TTL): a look-up never runs while such a post is in flight.
 *
 * Properties (each an assertion named after its guarantee, G2 an LTL claim). -DONLY=n keeps only
 * Gn (the mutant runs: a mutant passes only with a counterexample for the rule it names).
 *
 * Mutants (one -D at a time; each must produce a counterexample for the property named):
 *   MUTANT_FENCING      final check + commit without `lease_token = :token`                  G1
 *   MUTANT_FINAL_CHECK  final check + commit without `(version = V OR :deadline_passed)`    G3
 *   MUTANT_CLAIM_TOKEN  mark_sent / mark_retry / mark_failed and the claim renewal without    G1
 *                       `claim_token = :token`
 *   MUTANT_OLD_DELIVERY the delivery before the fix: no claim token and no renewal, so a slow G1
 *                       post outlives the claim; mark_retry on the owner, the other marks on
 *                       the state only
 *   MUTANT_TIMER        the commit deletes the timer even when newer input armed it          G2
 *   MUTANT_LONG_PAUSE   the fixed protocol without the timing assumption: a paused deliverer G1
 *                       may lose its claim while a post is on its way
 *   MUTANT_PARTITION    a deliverer cut off from the database posts its next part without    G1
 *                       the fence check (under a claim it cannot renew)
 *   MUTANT_SHUTDOWN_EARLY_RELEASE  shutdown releases the claims before the front ends stop:  G1
 *                       a cancelled post is still on its way when another process claims
 * With -DSTREAMING:
 *   MUTANT_DRAFT_BEFORE_KEY      the draft is posted before its key is recorded             G10
 *   MUTANT_DRAFT_PER_GENERATION  no reuse: every generation posts a draft of its own        G10
 *   MUTANT_DRAFT_LOOKUP_FROM_BURST  the look-up searches from the burst's newest message,   G10
 *                       not from the draft's recorded creation
 *   MUTANT_REFUSAL_KEEPS_DRAFT   a silent refusal commits without deleting the draft     G10
 * With -DSTREAMING -DDISCORD:
 *   MUTANT_NONCE_PAST_WINDOW     a draft is posted again with its key past the nonce     G10
 *                       window (Discord makes a second message), not looked up
 * With -DACTIONS (a generation makes one tool call with an effect; see the ACTIONS block):
 *   MUTANT_ACTION_UNRECORDED     the call runs before it is recorded (its record is written G14
 *                       with the result): a crash or supersede in between hides it
 * With -DSTREAMING -DSPECULATE (a generation may start before its burst's window closes):
 *   MUTANT_EARLY_COMMIT  a generation done before the close commits at once                 G4
 *   MUTANT_EARLY_DRAFT   a speculation shows its draft before the close                     G4
 * With -DSTREAMING -DSTOP (Stop clicks; see the STOP block):
 *   MUTANT_STOP_WITHOUT_CAS     the stop's decision is not conditional on the burst being    G16
 *                       unanswered and not stopped already: a second click stops it again
 *   MUTANT_COMMIT_IGNORES_STOP  the final check without the `stopping` rule: a generation's  G16
 *                       own answer commits over a decided stop
 *   MUTANT_CLICK_NOT_DEDUPED    the click id is not unique: a second delivery is stored and  G16
 *                       decided again
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
#ifndef MAXDEL
#define MAXDEL   1   /* drafts deleted by a person */
#endif
#define NW       2   /* worker processes (the Gen/Del/crash steps are written out for two) */
#define NPART    2   /* parts of a reply */
#define NKEY     6   /* draft keys 1 .. NKEY - 1 (more would be a model bound, asserted) */
#if defined(STOP)
#if !defined(STREAMING) || defined(SPECULATE) || defined(DISCORD) || defined(ACTIONS)
#error "the click world (-DSTOP) is built on the world with drafts (-DSTREAMING) alone"
#endif
#define NCLICK   2   /* Stop clicks (distinct platform click ids); each stops at most once */
#define NVER     (NMSG + NCLICK)   /* a decided stop raises the version like a message */
#else
#define NVER     NMSG
#endif

#if !defined(ONLY) || ONLY == 1
#define CHECK_G1 assert(G1_no_message_covered_twice)
#else
#define CHECK_G1 skip
#endif
#if !defined(ONLY) || ONLY == 3
#define CHECK_G3 assert(G3_no_reply_missed_input)
#else
#define CHECK_G3 skip
#endif
#if !defined(ONLY) || ONLY == 9
#define CHECK_G9 assert(G9_replies_in_commit_order)
#else
#define CHECK_G9 skip
#endif
#if !defined(ONLY) || ONLY == 10
#define CHECK_G10 assert(G10_one_visible_message_per_burst)
#define CHECK_G10_QUIET assert(G10_no_stray_draft)
#else
#define CHECK_G10 skip
#define CHECK_G10_QUIET skip
#endif
#if !defined(ONLY) || ONLY == 14
#define CHECK_G14 assert(G14_action_at_most_once)
#else
#define CHECK_G14 skip
#endif
#if !defined(ONLY) || ONLY == 16
#define CHECK_G16_ONE assert(G16_one_decision)
#define CHECK_G16_END assert(G16_stop_ends_burst)
#else
#define CHECK_G16_ONE skip
#define CHECK_G16_END skip
#endif

/* reply states */
#define PENDING 1
#define SENT    2
#define FAILED  3

/* Gen program counter */
#define G_IDLE    0
#define G_NOTHING 1   /* lease taken, nothing pending: drop the timer */
#define G_GEN     2   /* generating */
#define G_RELEASE 3   /* release the lease */
#define G_SKIP    4   /* refused silently (guard) or all deleted: commit without a reply */
#define G_STOPPED 5   /* a stop is pending (seen at the lease or by the watch): pending_stop */
#define G_STOP_COMMIT 6  /* the stopped answer: final check (stopping) + commit */

/* Gen draft state (STREAMING) */
#define DR_NONE   0   /* the generation has not touched the draft yet */
#define DR_POST   1   /* its draft post is on its way */
#define DR_READY  2   /* it streams into the draft (or its post's outcome is unknown) */

/* Del program counter */
#define D_IDLE     0
#define D_INFLIGHT 1   /* a post (or the final edit) is on its way; a read-back does not show it */
#define D_ERR      2   /* the post raised: mark_retry or mark_failed */
#define D_SENT     3   /* every part posted: mark_sent */

/* a draft post, per key, on the platform */
#define K_NONE    0   /* nothing posted with this key */
#define K_FLIGHT  1   /* a post with this key is on its way (not visible, not in a read) */
#define K_SHOWN   2   /* visible */
#define K_LOST    3   /* the post failed or was cancelled before it reached the platform */
#define K_DELETED 4   /* deleted (by a person, or by us) */

/* conversations row */
byte version;            /* accepted messages; message seq = version at arrival */
byte answered;           /* answered_version */
byte lease_owner;        /* 0 = NULL, else worker + 1 */
byte lease_token;        /* the fencing token, only increases */
bool lease_expired;      /* lease_expires_at < now */

/* debounce_timers row */
bool timer;
byte armed;              /* armed_version */
#if defined(SPECULATE)
bool window_open;        /* the armed window has not closed yet (now < due_at); the timer is
                            due before (start_at): a lease may be taken while it is open */
#endif

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

/* the platform, raw: posts received per (row, part) (a reply's final edit of its draft counts
   as its part 1, once); per message, the row whose post first covered it */
byte posts[NMSG * NPART];
byte covered_by[NVER + 1];

/* worker-local state, lost on a crash (global so that a crash can reset it) */
byte g_pc[NW], g_tok[NW], g_V[NW], g_ans[NW];
byte d_pc[NW], d_row[NW], d_tok[NW], d_part[NW];
byte d_have[NW];         /* bit p: the read-back found part p on the platform */
bool d_renew_failed[NW]; /* a claim renewal failed, or cannot reach the database */
#if defined(MUTANT_SHUTDOWN_EARLY_RELEASE)
bool d_shut[NW];         /* shut down with its cancelled post still on its way */
#define shut(w) d_shut[w]
#else
#define shut(w) false
#endif

#if defined(STREAMING)
/* the conversation's draft (draft_key with its created_at, draft_message_id) */
byte c_dkey;             /* 0 = none */
bool c_did;              /* the message id is recorded */
/* the reply's draft (handed over by the commit) */
byte r_dkey[NMSG];
bool r_did[NMSG];
bool r_edited[NMSG];     /* the final edit turned the draft into the reply's part 1 */
/* draft keys, 1 .. nkeys: the platform's message with that key, and what it answers */
byte nkeys;
byte k_state[NKEY];
byte k_lo[NKEY];         /* answered_version at creation: it answers the pending burst after it */
#if defined(MUTANT_DRAFT_LOOKUP_FROM_BURST)
byte k_landv[NKEY];      /* version when it landed: it sits after messages 1 .. k_landv */
#endif
byte k_owner[NKEY];      /* 0, or the reply + 1 it was handed to */
byte g_dr[NW], g_key[NW];
#if defined(DISCORD)
bool k_window[NKEY];     /* Discord still dedupes a post with this key (its nonce window) */
byte g_rep[NW];          /* its draft post is a re-post of the key: 1 the only one on its way,
                            2 an earlier post with the key is on its way too, 0 a first post */
#endif
byte deletes;
#endif

#if defined(STOP)
/* Stop clicks: conversations.stop_version, and the clicks table by click id (index c: click
   c + 1). A click names the draft it was pressed on (its target); its rows (1, or with the
   mutant one per delivery), the outcome decided and the stop's version. */
#define CL_STOPPED 1
#define CL_NOT     2   /* ended, already stopped (the clicker is told; nothing changes) */
byte stop_v;             /* 0 = NULL */
byte cl_target[NCLICK];  /* 0: not clicked yet */
byte cl_rows[NCLICK];
byte cl_outcome[NCLICK]; /* 0: not decided */
byte cl_version[NCLICK];
/* ghost: a stop was decided while answered_version was a (the burst after a was stopped) */
byte stop_of[NVER + 1];  /* the stop's version, 0: none */
/* messages.seq: the version message k's arrival made (0: not stored). A Slack agent session's
   stop (SESSION) names a message, target MSG_TARGET + k, instead of a draft. */
#define MSG_TARGET 16
byte m_seq[NMSG];
#endif

/* fault budgets */
byte crashes, stalls;

/* scratch inside atomic steps, not part of the state */
hidden byte h_r, h_i, h_s, h_dl, h_k, h_j, h_lo, h_hi;
hidden byte G1_no_message_covered_twice;
hidden byte G3_no_reply_missed_input;
hidden byte G9_replies_in_commit_order;
hidden byte G10_one_visible_message_per_burst;
hidden byte G10_no_stray_draft;
hidden byte G4_nothing_before_close;
hidden byte G16_one_decision;
hidden byte G16_stop_ends_burst;
hidden byte h_stopping;  /* the commit is the stopped answer (FinalCheck.stopping) */
hidden byte model_bound_draft_keys;

/* G2: from some point on, every accepted message is answered and every reply is sent or
   failed for good (a logged skip). Checked by an acceptance-cycle search (pan -a). */
#define settled (answered == version && npending == 0)
#if !defined(ONLY) || ONLY == 2
ltl G2_every_message_covered { <> [] settled }
#endif

#if defined(SPECULATE) && (!defined(ONLY) || ONLY == 4)
#define CHECK_G4 assert(G4_nothing_before_close)
#else
#define CHECK_G4 skip
#endif

/* G4's hold: nothing of a speculation is visible, and nothing committed, before its window
   closes (newer input makes the final check refuse it, or the deadline closed the window) */
#if defined(SPECULATE)
#define g4_check() G4_nothing_before_close = !window_open; CHECK_G4
#if defined(MUTANT_EARLY_COMMIT)
#define HOLD_COMMIT(w) true
#else
#define HOLD_COMMIT(w) (!window_open || version != g_V[w])
#endif
#if defined(MUTANT_EARLY_DRAFT)
#define HOLD_DRAFT true
#else
#define HOLD_DRAFT (!window_open)
#endif
#define HOLD_SKIP (!window_open)
#define DEADLINE_MAY_PASS (!window_open)
#else
#define HOLD_SKIP true
#define g4_check() skip
#define HOLD_COMMIT(w) true
#define HOLD_DRAFT true
#define DEADLINE_MAY_PASS true
#endif

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

/* the final check's `stopping` rule: while a stop is pending only the stopped answer, covering
   up to the stop's version, commits; otherwise no stop may be pending */
#if defined(STOP) && defined(MUTANT_COMMIT_IGNORES_STOP)
#define STOP_RULE(w) true
#elif defined(STOP)
#define STOP_RULE(w) (h_stopping -> stop_v == g_V[w] : stop_v <= answered)
#else
#define STOP_RULE(w) true
#endif

/* G16 at every commit (a reply, or a burst answered without one): a burst with a decided stop
   is answered by its stopped answer alone, covering up to the stop */
#if defined(STOP)
#define g16_commit_check(w) \
  G16_stop_ends_burst = (h_stopping -> stop_of[answered] == g_V[w] : stop_of[answered] == 0); \
  CHECK_G16_END
#else
#define g16_commit_check(w) skip
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
#if defined(STOP)
     m_seq[k] = version;
#endif
     timer = true;
     armed = version;
#if defined(SPECULATE)
     window_open = true;
#endif
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

#if defined(SPECULATE)
/* Time passes: the armed window closes (now reaches due_at), at any point after an arrival. */
proctype Time() {
end:
  do
  :: d_step { window_open -> window_open = false; printf("the window closes\n") }
  od
}
#endif

/* ---------------------------------------------------------------------------------------------
 * The streamed draft (STREAMING): one per pending burst of the conversation, not per generation.
 */
#if defined(STREAMING)
/* a generation's platform calls end with its lease fence */
#define LIVE(w) (lease_token == g_tok[w] && lease_owner == w + 1 && !lease_expired)

/* a look-up by key, from the draft's recorded creation on (the mutant: from the burst's newest
   message V on, so a draft that landed before message V is missed) */
#if defined(MUTANT_DRAFT_LOOKUP_FROM_BURST)
#define found(k, V) (k_state[k] == K_SHOWN && k_landv[k] >= (V))
#else
#define found(k, V) (k_state[k] == K_SHOWN)
#endif

/* the conversation's draft may be looked up (no post with its key in flight), or needs none */
#if defined(MUTANT_DRAFT_PER_GENERATION)
#define may_look(w) true
#else
#define may_look(w) (c_dkey == 0 || c_did || k_state[c_dkey] != K_FLIGHT)
#endif

/* Discord (-DDISCORD): a draft whose post outcome is unknown is posted again with its key while
   Discord still dedupes that nonce (Discord returns the message an earlier post made, or makes
   it); past the window it is looked up in the history like on Slack. The mutant posts again
   past the window too, where Discord makes a second message. */
#if defined(DISCORD) && defined(MUTANT_NONCE_PAST_WINDOW)
#define repost(k) true
#elif defined(DISCORD)
#define repost(k) k_window[k]
#else
#define repost(k) false
#endif
/* the first text may go to the draft: no look-up needed, or it may run, or (Discord) a re-post
   with the key replaces it */
#define may_stream(w) (may_look(w) || repost(c_dkey))

#define finished(k) (k_owner[k] != 0 && r_edited[k_owner[k] - 1])

/* the burst a draft answers: its reply's once handed over, else the pending burst from its
   creation on */
inline draft_range(k) {
  if
  :: k_owner[k] != 0 -> h_lo = r_seen[k_owner[k] - 1]; h_hi = r_to[k_owner[k] - 1]
  :: else -> h_lo = k_lo[k]; h_hi = 255
  fi
}

/* G10 on what the platform shows: a draft that is not (yet) its reply's part 1 never shows
   beside another of our messages answering an overlapping burst: another draft, or a reply's
   part 1 posted as a message of its own. */
inline g10_check() {
  G10_one_visible_message_per_burst = true;
  h_k = 1;
  do
  :: h_k <= nkeys ->
     if
     :: k_state[h_k] == K_SHOWN && !finished(h_k) ->
        h_j = 1;
        do
        :: h_j <= nkeys ->
           if
           :: h_j != h_k && k_state[h_j] == K_SHOWN ->
              draft_range(h_j); h_s = h_lo; h_i = h_hi;
              draft_range(h_k);
              G10_one_visible_message_per_burst = G10_one_visible_message_per_burst &&
                  !(h_s < h_hi && h_lo < h_i)
           :: else
           fi;
           h_j++
        :: else -> break
        od;
        draft_range(h_k);
        h_j = 0;
        do
        :: h_j < nrows ->
           G10_one_visible_message_per_burst = G10_one_visible_message_per_burst &&
               !(posts[h_j * NPART] > r_edited[h_j] && r_seen[h_j] < h_hi && h_lo < r_to[h_j]);
           h_j++
        :: else -> break
        od
     :: else
     fi;
     h_k++
  :: else -> break
  od;
  CHECK_G10;
  h_k = 0; h_j = 0; h_s = 0; h_i = 0; h_lo = 0; h_hi = 0
}

inline draft_lands(k) {
  k_state[k] = K_SHOWN;
#if defined(MUTANT_DRAFT_LOOKUP_FROM_BURST)
  k_landv[k] = version;
#endif
  printf("platform: draft %d shows\n", k);
  g10_check()
}

/* record_draft (a fresh key and its creation time, fenced by the lease token), then the post
   carrying the key; the mutant posts first and records the key when the post returns */
inline new_draft(w) {
  model_bound_draft_keys = (nkeys + 1 < NKEY);
  assert(model_bound_draft_keys);
  nkeys++;
  k_state[nkeys] = K_FLIGHT;
  k_lo[nkeys] = g_ans[w];
#if defined(DISCORD)
  k_window[nkeys] = true;
  g_rep[w] = 0;
#endif
#if defined(MUTANT_DRAFT_BEFORE_KEY)
  printf("%c: posts draft %d (its key not recorded yet)\n", 65 + w, nkeys);
#else
  c_dkey = nkeys;
  c_did = false;
  printf("%c: records draft %d (key, created) and posts it\n", 65 + w, nkeys);
#endif
  g_key[w] = nkeys;
  g_dr[w] = DR_POST
}

/* record_draft with the message id, fenced by the lease token */
inline record_id(w, withid) {
#if defined(MUTANT_DRAFT_BEFORE_KEY)
  if
  :: lease_token == g_tok[w] && lease_owner != 0 && c_dkey == 0 ->
     c_dkey = g_key[w];
     c_did = withid;
     printf("%c: records draft %d (key, id known %d)\n", 65 + w, c_dkey, withid)
  :: else ->
     printf("%c: recording draft %d changed nothing\n", 65 + w, g_key[w])
  fi;
#else
  if
  :: withid && lease_token == g_tok[w] && lease_owner != 0 && c_dkey == g_key[w] ->
     c_did = true;
     printf("%c: records draft %d's id\n", 65 + w, c_dkey)
  :: else
  fi;
#endif
  g_dr[w] = DR_READY
}

/* a generation waits for the outcome of its post with key k */
#define waits(w, k) (g_pc[w] == G_GEN && g_dr[w] == DR_POST && g_key[w] == (k))

#if defined(DISCORD)
/* the conversation's draft posted again with its key */
inline repost_draft(w) {
  g_key[w] = c_dkey;
  if
  :: k_state[c_dkey] == K_FLIGHT -> g_rep[w] = 2
  :: k_state[c_dkey] == K_LOST || k_state[c_dkey] == K_NONE -> g_rep[w] = 1; k_state[c_dkey] = K_FLIGHT
  :: else -> g_rep[w] = 2
  fi;
  printf("%c: posts draft %d again with its key (nonce window open %d)\n", 65 + w, c_dkey,
         k_window[c_dkey]);
  g_dr[w] = DR_POST
}

/* a post with the key reaches Discord (a first post or a re-post): within the window Discord
   returns the message an earlier post with that nonce made (even one deleted since), or makes
   it if none did; past the window (only the mutant's re-post gets there) it makes another
   message, a copy answering the same burst */
inline nonce_lands(w, k) {
  if
  :: k_window[k] && (k_state[k] == K_SHOWN || k_state[k] == K_DELETED) ->
     printf("platform: nonce of draft %d seen: the earlier message is returned\n", k)
  :: k_state[k] == K_FLIGHT || k_state[k] == K_LOST -> draft_lands(k)
  :: !k_window[k] && (k_state[k] == K_SHOWN || k_state[k] == K_DELETED) ->
     model_bound_draft_keys = (nkeys + 1 < NKEY);
     assert(model_bound_draft_keys);
     nkeys++;
     k_lo[nkeys] = k_lo[k];
     k_owner[nkeys] = k_owner[k];
     printf("platform: nonce window of draft %d over: a second message, draft %d\n", k, nkeys);
     draft_lands(nkeys)
  fi
}

/* the post failed: another post with the key (an earlier one, or the other worker's) may
   still be on its way */
inline nonce_failed(w, k) {
  if
  :: k_state[k] == K_FLIGHT && g_rep[w] != 2 && !waits(1 - w, k) -> k_state[k] = K_LOST
  :: else
  fi
}

#define WINDOW_ENDS(k) \
  :: d_step { (k) <= nkeys && k_window[k] && k_state[k] != K_FLIGHT && !waits(0, k) && \
              !waits(1, k) -> \
       k_window[k] = false; printf("Discord: the nonce window of draft %d ends\n", k) }
#endif

/* a post nobody waits for any more (its generation crashed, was cancelled, committed or lost
   its fence) lands later or never */
#define orphan(k) (k_state[k] == K_FLIGHT && !waits(0, k) && !waits(1, k))
#define deletable(k) (deletes < MAXDEL && k_state[k] == K_SHOWN && !finished(k))

inline person_deletes(k) {
  deletes++;
  k_state[k] = K_DELETED;
  printf("person: deletes draft %d\n", k)
}

/* at quiescence no draft shows text that is not the conversation's answer (a draft whose reply
   failed for good keeps what it had: the failure is the logged skip) */
proctype Quiet() {
  atomic {
    timeout ->
    G10_no_stray_draft = true;
    h_k = 1;
    do
    :: h_k <= nkeys ->
       G10_no_stray_draft = G10_no_stray_draft &&
           !(k_state[h_k] == K_SHOWN && !finished(h_k) &&
             !(k_owner[h_k] != 0 && r_state[k_owner[h_k] - 1] == FAILED));
       h_k++
    :: else -> break
    od;
    printf("quiet: every draft checked\n");
    CHECK_G10_QUIET;
    h_k = 0
#if defined(STOP)
    ;
    /* G16: a decided stop has ended its burst, answered */
    G16_stop_ends_burst = (stop_of[answered] == 0);
    CHECK_G16_END
#endif
  }
}

#define is_edit(w) (d_part[w] == 0 && r_dkey[d_row[w]] != 0)
#define reachable(w) (!is_edit(w) || k_state[r_dkey[d_row[w]]] == K_SHOWN)
#define drafts_ready(r) (r_dkey[r] == 0 || r_did[r] || k_state[r_dkey[r]] != K_FLIGHT)
#else
#define is_edit(w) false
#define reachable(w) true
#define drafts_ready(r) true
#endif

/* ---------------------------------------------------------------------------------------------
 * 1b. Stop clicks (STOP). A person presses Stop on a draft that shows; the platform delivers
 * the click, and may deliver it again (a retry, or to the other process). Each delivery is the
 * store's one transaction (storage/clicks.py): insert_click (a stored click id inserts nothing:
 * a duplicate), decide_stop (one conditional UPDATE: what the click names is still the pending
 * burst's (the clicked draft is the conversation's, or, a session's stop, the named message is
 * not answered yet), its burst unanswered and not stopped already; it raises the version and
 * sets stop_version to it), arm_stop_timer (due now, armed at the stop's version), decide_click.
 * Who may stop (an author of the burst, or an admin) is not modelled: every click may.
 */
#if defined(STOP)
#define names_pending(c) (c_dkey == cl_target[c] || (cl_target[c] >= MSG_TARGET && \
                          m_seq[cl_target[c] - MSG_TARGET] > answered))
#if defined(MUTANT_STOP_WITHOUT_CAS)
#define STOP_CAS(c) (c_dkey == cl_target[c])
#else
#define STOP_CAS(c) (answered < version && names_pending(c) && stop_v <= answered)
#endif
#if defined(MUTANT_CLICK_NOT_DEDUPED)
#define STORED_ALREADY(c) false
#else
#define STORED_ALREADY(c) (cl_rows[c] > 0)
#endif

/* pending_stop: a decided stop not answered yet, joined with its click */
#define pending_stop() \
  (stop_v > answered && \
   ((cl_outcome[0] == CL_STOPPED && cl_version[0] == stop_v) || \
    (cl_outcome[1] == CL_STOPPED && cl_version[1] == stop_v)))

inline click_tx(c) {
  if
  :: STORED_ALREADY(c) ->
     printf("click %d delivered again: duplicate, nothing changes\n", c + 1)
  :: else ->
     cl_rows[c]++;
     if
     :: STOP_CAS(c) ->
        /* G16: a burst is stopped at most once */
        G16_one_decision = (stop_of[answered] == 0);
        CHECK_G16_ONE;
        version++;
        stop_v = version;
        stop_of[answered] = version;
        timer = true;
        armed = version;
        h_i = CL_STOPPED;
        h_s = version;
        printf("click %d stops burst (%d, %d]: version %d, timer armed\n",
               c + 1, answered, version - 1, version)
     :: else ->
        h_i = CL_NOT;
        h_s = 0;
        printf("click %d on target %d changes nothing (ended or stopped already)\n",
               c + 1, cl_target[c])
     fi;
     /* decide_click. G16: a click is decided once (a second delivery changes nothing) */
     G16_one_decision = (cl_outcome[c] == 0);
     CHECK_G16_ONE;
     cl_outcome[c] = h_i;
     cl_version[c] = h_s;
     h_i = 0;
     h_s = 0
  fi
}

/* a press on draft k while it shows, delivered at once (a delivery that comes later is a later
   press on the same draft; click 2 after click 1: another person, or a second press) */
#define PRESS(c, k) \
  :: d_step { cl_target[c] == 0 && ((c) == 0 || cl_target[0] != 0) && (k) <= nkeys && \
              k_state[k] == K_SHOWN -> \
       cl_target[c] = k; \
       printf("person: presses Stop on draft %d (click %d)\n", k, (c) + 1); \
       click_tx(c) }

/* SESSION: a press on a Slack agent session's Stop, whose "processing" went on for message k
   (noted on the conversation): any time after k arrived, so also late, after its burst was
   answered (a press delivered late, or the session left showing processing) */
#define SESSION_PRESS(c, k) \
  :: d_step { (k) < NMSG && cl_target[c] == 0 && ((c) == 0 || cl_target[0] != 0) && \
              stored[k] -> \
       cl_target[c] = MSG_TARGET + k; \
       printf("person: presses Stop on the session of message %d (click %d)\n", \
              (k) + 1, (c) + 1); \
       click_tx(c) }

proctype Person() {
  bool again;   /* click 1 was delivered again */
end:
  do
#if defined(SESSION)
  SESSION_PRESS(0, 0) SESSION_PRESS(0, 1) SESSION_PRESS(0, 2)
  SESSION_PRESS(1, 0) SESSION_PRESS(1, 1) SESSION_PRESS(1, 2)
#else
  PRESS(0, 1) PRESS(0, 2) PRESS(0, 3) PRESS(0, 4) PRESS(0, 5)
  PRESS(1, 1) PRESS(1, 2) PRESS(1, 3) PRESS(1, 4) PRESS(1, 5)
#endif
  /* click 1 delivered again (a retry, or to the other process), at any later point */
  :: d_step { cl_target[0] != 0 && !again -> again = true; click_tx(0) }
  od
}
#endif

/* ---------------------------------------------------------------------------------------------
 * 2-5. Timer, lease, collect, generate, final check + commit.
 */
#if defined(STREAMING)
/* stopping the stream cancels its call in flight (the post, if sent, lands or not on its own) */
#if defined(DISCORD)
#define stream_stop(w) g_dr[w] = DR_NONE; g_key[w] = 0; g_rep[w] = 0
#else
#define stream_stop(w) g_dr[w] = DR_NONE; g_key[w] = 0
#endif
#else
#define stream_stop(w) skip
#endif

inline gen_reset(w) {
  g_pc[w] = G_IDLE; g_tok[w] = 0; g_V[w] = 0; g_ans[w] = 0;
  stream_stop(w)
}

/* final_check, insert_reply, hand_draft_to_reply, drop_timer / restart_cap: one transaction */
inline commit(w) {
  /* UNIQUE (conversation_id, covers_to_version) */
  h_s = 0; h_r = 0;
  do
  :: h_s < nrows -> if :: r_to[h_s] == g_V[w] -> h_r = 1 :: else fi; h_s++
  :: else -> break
  od;
  if
  :: FENCE(w) && answered < g_V[w] && CURRENT(w) && STOP_RULE(w) && !h_r ->
     g4_check();
     g16_commit_check(w);
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
#if defined(STREAMING)
     r_dkey[h_r] = c_dkey;
     r_did[h_r] = c_did;
     if
     :: c_dkey != 0 ->
        k_owner[c_dkey] = h_r + 1;
        printf("%c: reply %d takes over draft %d (id known %d)\n", 65 + w, h_r + 1, c_dkey, c_did)
     :: else
     fi;
     c_dkey = 0;
     c_did = false;
#endif
     if
     :: timer && TIMER_COVERED(w) -> timer = false
     :: else   /* newer input keeps its timer (restart_cap) */
     fi;
     gen_reset(w)
  :: else ->
     printf("%c: final check refused burst (%d, %d]: discarded\n", 65 + w, g_ans[w], g_V[w]);
     g_pc[w] = G_RELEASE;
     stream_stop(w)
  fi;
  h_dl = 0; h_r = 0; h_s = 0; h_stopping = 0
}

#if defined(STREAMING)
/* a silent guard refusal or an all-deleted burst: the same final check, answered_version = V
   without a reply, and the draft record closed (its message was deleted before) */
inline skip_commit(w) {
  if
  :: FENCE(w) && answered < g_V[w] && CURRENT(w) && STOP_RULE(w) ->
     g4_check();
     g16_commit_check(w);
     answered = g_V[w];
     lease_owner = 0;
     lease_expired = false;
     c_dkey = 0;
     c_did = false;
     printf("%c: burst (%d, %d] answered without a reply\n", 65 + w, g_ans[w], g_V[w]);
     if
     :: timer && TIMER_COVERED(w) -> timer = false
     :: else
     fi;
     gen_reset(w)
  :: else ->
     printf("%c: final check refused the skip of burst (%d, %d]\n", 65 + w, g_ans[w], g_V[w]);
     g_pc[w] = G_RELEASE
  fi;
  h_dl = 0
}
#if defined(SPECULATE)
#define streamed(w) true   /* a generation done before its window closed commits undrafted */
#else
#define streamed(w) (g_dr[w] != DR_NONE)
#endif
#else
#define streamed(w) true
#endif

#if defined(DISCORD)
#define LANDS(w, k) nonce_lands(w, k); g_rep[w] = 0
#define FAILS(w, k) nonce_failed(w, k); g_rep[w] = 0
#else
#define LANDS(w, k) draft_lands(k)
#define FAILS(w, k) k_state[k] = K_LOST
#endif

#if defined(ACTIONS)
/* tool actions (G14), per burst key (the answered version a lease saw): recorded, result
   recorded, and the server's own count of calls; per worker, its action's step and the lease
   token it belongs to (a new lease, after a crash or release, starts with no action) */
#define A_NONE     0
#define A_RECORDED 1   /* recorded (or, in the mutant, about to run unrecorded) */
#define A_CALLED   2   /* the call reached the server; its result not recorded yet */
#define A_GIVEN    3   /* done, or given from the record */
bool a_rec[NMSG + 1];
bool a_res[NMSG + 1];
byte a_calls[NMSG + 1];
byte a_pc[NW];
byte a_tok[NW];
hidden byte G14_action_at_most_once;
#define ACT(w) (a_tok[w] == g_tok[w] -> a_pc[w] : A_NONE)
#endif

proctype Gen(byte w) {
end:
  do
  /* 2. Timer due: acquire_lease (free, then a takeover). 3. Collect: V and answered_version come
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
#if defined(STOP)
       /* the lease returns a pending stop (stop_version > answered_version): the burst is
          answered as stopped, with no model call */
       :: g_V[w] > g_ans[w] && stop_v > answered ->
          printf("%c: the lease sees the stop of version %d\n", 65 + w, stop_v);
          g_pc[w] = G_STOPPED
#endif
       :: else -> g_pc[w] = G_GEN
       fi
#if defined(STOP)
       ;
       /* G16: nothing of a stopped burst is generated again */
       G16_stop_ends_burst = !(g_pc[w] == G_GEN && stop_of[answered] != 0);
       CHECK_G16_END
#endif
     }
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
#if defined(STOP)
  /* the watch: newer input that is a decided stop (pending_stop) ends the generation as
     stopped and cancels its stream, whether or not the deadline has passed */
  :: d_step { g_pc[w] == G_GEN && version > g_V[w] && pending_stop() ->
       printf("%c: version %d > %d is a stop: generation cancelled\n", 65 + w, version, g_V[w]);
       g_pc[w] = G_STOPPED;
       stream_stop(w) }
  /* the stopped answer (Engine._stopped): pending_stop again (none: answered meanwhile, release),
     then the final check with `stopping` and the stop's version, the deadline passed, and the
     commit: the text shown so far covers the burst up to the stop, through the draft */
  :: d_step { g_pc[w] == G_STOPPED ->
       if
       :: pending_stop() -> g_V[w] = stop_v; g_pc[w] = G_STOP_COMMIT
       :: else ->
          printf("%c: no pending stop: releases\n", 65 + w);
          g_pc[w] = G_RELEASE
       fi }
  :: d_step { g_pc[w] == G_STOP_COMMIT ->
       printf("%c: commits the stopped answer up to version %d\n", 65 + w, g_V[w]);
       h_dl = 1;
       h_stopping = 1;
       commit(w) }
#define SUPERSEDE(w) (version > g_V[w] && !pending_stop())
#else
#define SUPERSEDE(w) (version > g_V[w])
#endif
  /* newer input before the deadline: cancel, then release */
  :: d_step { g_pc[w] == G_GEN && SUPERSEDE(w) ->
       printf("%c: version %d > %d: generation cancelled\n", 65 + w, version, g_V[w]);
       g_pc[w] = G_RELEASE;
       stream_stop(w) }
#if defined(STREAMING)
  /* The first text: the conversation's draft. None: record a fresh key, post. Id recorded: edit
     it (not found: a person deleted it; a fresh draft replaces it). Key without id: look it up
     by key from its creation (only once an earlier post could show); found: record the id;
     absent: a fresh draft. The mutant posts a draft of its own every time. */
  :: d_step { g_pc[w] == G_GEN && g_dr[w] == DR_NONE && LIVE(w) && may_stream(w) && HOLD_DRAFT ->
       g4_check();
       if
#if defined(MUTANT_DRAFT_PER_GENERATION)
       :: true -> new_draft(w)
#else
       :: c_dkey == 0 -> new_draft(w)
       :: c_dkey != 0 && c_did && k_state[c_dkey] == K_SHOWN ->
          printf("%c: streams into draft %d\n", 65 + w, c_dkey);
          g_dr[w] = DR_READY
       :: c_dkey != 0 && c_did && k_state[c_dkey] != K_SHOWN ->
          printf("%c: edit of draft %d: not found\n", 65 + w, c_dkey);
          new_draft(w)
#if defined(DISCORD)
       :: c_dkey != 0 && !c_did && repost(c_dkey) -> repost_draft(w)
       :: c_dkey != 0 && !c_did && !repost(c_dkey) && found(c_dkey, g_V[w]) ->
#else
       :: c_dkey != 0 && !c_did && found(c_dkey, g_V[w]) ->
#endif
          c_did = true;
          printf("%c: look-up finds draft %d; id recorded, streams into it\n", 65 + w, c_dkey);
          g_dr[w] = DR_READY
       :: else ->
          printf("%c: look-up proves draft %d absent\n", 65 + w, c_dkey);
          new_draft(w)
#endif
       fi }
  /* the draft post's outcome: it lands and returns (the id is recorded), lands and raises, or
     fails */
  :: atomic { g_pc[w] == G_GEN && g_dr[w] == DR_POST ->
       if
       :: d_step { printf("%c: draft %d lands, the post returns\n", 65 + w, g_key[w]);
                   h_k = g_key[w]; record_id(w, 1); LANDS(w, h_k) }
       :: d_step { printf("%c: draft %d lands, the post raises\n", 65 + w, g_key[w]);
                   h_k = g_key[w]; record_id(w, 0); LANDS(w, h_k) }
       :: d_step { printf("%c: the draft post failed\n", 65 + w);
                   FAILS(w, g_key[w]);
                   record_id(w, 0) }
       fi }
  /* a silent guard refusal (or an all-deleted burst) before any text: the draft is deleted
     (looked up first when its id is unknown), then the burst is committed without a reply */
  :: d_step { g_pc[w] == G_GEN && g_dr[w] == DR_NONE && LIVE(w) && may_look(w) && HOLD_SKIP ->
       g4_check();
       printf("%c: burst (%d, %d] refused silently\n", 65 + w, g_ans[w], g_V[w]);
       if
#if !defined(MUTANT_REFUSAL_KEEPS_DRAFT)
       :: c_dkey != 0 && ((c_did && k_state[c_dkey] == K_SHOWN) || (!c_did && found(c_dkey, g_V[w]))) ->
          k_state[c_dkey] = K_DELETED;
          printf("%c: deletes draft %d\n", 65 + w, c_dkey)
#endif
       :: else
       fi;
       g_pc[w] = G_SKIP }
  :: atomic { g_pc[w] == G_SKIP && HOLD_COMMIT(w) ->
       if
       :: version != g_V[w] && DEADLINE_MAY_PASS -> h_dl = 1
       :: version != g_V[w] -> h_dl = 0
       :: else -> h_dl = 0
       fi;
       d_step { skip_commit(w) } }
#endif
#if defined(ACTIONS)
  /* G14: the generation's one tool call with an effect (`create_ticket`), made only inside the
     generation (after the window closed). Its key is the burst's: (conversation, answered
     version at the lease), so every generation of one burst has the same key. Record it fenced
     by the lease token (`begin_action`); a key already recorded is given, never run again; then
     the call reaches the server; then its result is recorded (`finish_action`). A crash,
     supersede or lost lease may fall between any two steps. The mutant runs the call first and
     writes the record with the result. */
  :: d_step { g_pc[w] == G_GEN && ACT(w) == A_NONE && lease_token == g_tok[w] && lease_owner == w + 1 ->
       a_tok[w] = g_tok[w];
       if
       :: a_rec[g_ans[w]] ->
          printf("%c: action of burst %d recorded already: given, not run\n", 65 + w, g_ans[w]);
          a_pc[w] = A_GIVEN
#if defined(MUTANT_ACTION_UNRECORDED)
       :: else -> a_pc[w] = A_RECORDED
#else
       :: else ->
          a_rec[g_ans[w]] = true;
          printf("%c: action of burst %d recorded\n", 65 + w, g_ans[w]);
          a_pc[w] = A_RECORDED
#endif
       fi }
  :: d_step { g_pc[w] == G_GEN && ACT(w) == A_RECORDED ->
       a_calls[g_ans[w]]++;
       printf("%c: create_ticket runs for burst %d (call %d)\n", 65 + w, g_ans[w], a_calls[g_ans[w]]);
       G14_action_at_most_once = (a_calls[g_ans[w]] <= 1);
       CHECK_G14;
       a_pc[w] = A_CALLED }
  :: d_step { g_pc[w] == G_GEN && ACT(w) == A_CALLED ->
       a_rec[g_ans[w]] = true;
       a_res[g_ans[w]] = true;
       a_pc[w] = A_GIVEN }
#endif
  /* 5. Generation done (its text streamed): final check + commit. Whether the deadline has
     passed is the worker's reading of the clock; it matters only when newer input exists. */
  :: atomic { g_pc[w] == G_GEN && streamed(w) && HOLD_COMMIT(w) ->
       if
       :: version != g_V[w] && DEADLINE_MAY_PASS -> h_dl = 1
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
  CHECK_G1;
  G3_no_reply_missed_input = !r_stale[h_r];
  CHECK_G3;
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
  CHECK_G9;
  posts[h_r * NPART + d_part[w]]++;
  h_r = 0; h_i = 0; h_s = 0
}

/* The call in flight reaches the platform: a post, or the final edit that turns the reply's
   draft into its part 1 (a second identical edit changes nothing). */
inline reach(w) {
#if defined(STREAMING)
  if
  :: is_edit(w) ->
     if
     :: !r_edited[d_row[w]] ->
        printf("platform: draft %d edited into reply %d part 1\n", r_dkey[d_row[w]], d_row[w] + 1);
        land(w);
        r_edited[d_row[w]] = true;
        g10_check()
     :: else ->
        printf("platform: draft %d already shows reply %d\n", r_dkey[d_row[w]], d_row[w] + 1)
     fi
  :: else ->
     land(w);
     if
     :: d_part[w] == 0 -> g10_check()
     :: else
     fi
  fi
#else
  land(w)
#endif
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

/* The claim and claim-expiry steps are written out per row: rows 0 .. 2 (NMSG <= 3). A reply
   whose draft's post outcome is unknown is claimed once that post could show (its look-up). */
#define earlier_done(r) \
  (((r) < 1 || r_state[0] != PENDING) && ((r) < 2 || r_state[1] != PENDING))
#define claimable(r) \
  ((r) < nrows && r_state[r] == PENDING && (r_owner[r] == 0 || r_expired[r]) && \
   earlier_done(r) && drafts_ready(r))

/* claim_reply; a redelivery (attempt > 1) first reads back the parts the platform shows with
   this reply's idempotency key (a post in flight does not show yet). A draft whose id is
   unknown is looked up by its key: found, its id is recorded; absent, the reply's draft
   reference is cleared and part 1 is posted as a message. */
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
#if defined(STREAMING)
  if
  :: r_dkey[r] != 0 && !r_did[r] ->
     if
     :: found(r_dkey[r], r_to[r]) ->
        r_did[r] = true;
        printf("%c: look-up finds draft %d; id recorded\n", 65 + w, r_dkey[r])
     :: else ->
        printf("%c: look-up proves draft %d absent\n", 65 + w, r_dkey[r]);
        r_dkey[r] = 0
     fi
  :: else
  fi;
  /* an edit is repeated (idempotent): the draft is never skipped by the read-back */
  if
  :: r_dkey[r] != 0 -> d_have[w] = d_have[w] & 2
  :: else
  fi;
#endif
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
#if defined(MUTANT_SHUTDOWN_EARLY_RELEASE)
  /* a shut-down process's cancelled post, still on its way after its claim was released */
  :: atomic { shut(w) && d_pc[w] == D_INFLIGHT ->
       if
       :: d_step { reachable(w) -> reach(w) }
       :: d_step { printf("platform: the cancelled post never arrives\n") }
       fi;
       d_step { d_shut[w] = false; del_reset(w) } }
#endif
  /* the post's (or final edit's) outcome: it lands and returns; it lands but the call fails (a
     timeout); it fails */
  :: atomic { d_pc[w] == D_INFLIGHT && reachable(w) && !shut(w) ->
       if
       :: d_step { reach(w); d_part[w]++; next_part(w) }
       :: d_step { reach(w); printf("%c: the post raised after it landed\n", 65 + w); d_pc[w] = D_ERR }
       :: d_step { printf("%c: the post failed\n", 65 + w); d_pc[w] = D_ERR }
       fi }
#if defined(STREAMING)
  /* the final edit finds no message (a person deleted the draft): the reply's draft reference
     is cleared (fenced by the claim) and part 1 is posted as a message, once */
  :: d_step { d_pc[w] == D_INFLIGHT && !reachable(w) && !shut(w) ->
       if
       :: CLAIM_FENCE(w, d_row[w]) && r_state[d_row[w]] == PENDING ->
          printf("%c: final edit of draft %d: not found; posts reply %d part 1\n",
                 65 + w, r_dkey[d_row[w]], d_row[w] + 1);
          r_dkey[d_row[w]] = 0
       :: else ->
          printf("%c: final edit of draft %d: not found; claim lost\n", 65 + w, r_dkey[d_row[w]]);
          del_reset(w)
       fi }
#endif
#if !defined(MUTANT_OLD_DELIVERY)
  /* while a post is on its way: renew the claim (a step only when it changes something) */
  :: d_step { d_pc[w] == D_INFLIGHT && !d_renew_failed[w] && !shut(w) &&
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
 * Faults: crashes, expiry, a deliverer cut off from the database, orphaned draft posts, a
 * person deleting a draft.
 */
#define busy(w) (g_pc[w] != G_IDLE || d_pc[w] != D_IDLE)

inline crash(w) {
  crashes++;
  printf("%c: crash and restart\n", 65 + w);
  if
  :: d_pc[w] == D_INFLIGHT && reachable(w) ->
     if
     :: d_step { reach(w) }
     :: skip
     fi
  :: else
  fi;
  gen_reset(w);
  del_reset(w)
}

/* Shutdown (SIGTERM): generations are cancelled, a delivery past the grace period is cancelled
   after its post was sent, the front ends stop, and only then are the process's leases and
   claims released (`release_owner_leases`, `release_owner_claims`), so the other process takes
   them over at once. The front ends stop first: by the release, the post that was sent has
   reached the platform or never will. The mutant releases first: the post is still on its way
   when the claim is free, and lands on its own later. */
inline release_owner(w) {
  if
  :: lease_owner == w + 1 -> lease_owner = 0; lease_expired = false
  :: else
  fi;
  h_r = 0;
  do
  :: h_r < nrows ->
     if
     :: r_owner[h_r] == w + 1 && r_state[h_r] == PENDING -> r_owner[h_r] = 0; r_expired[h_r] = false
     :: else
     fi;
     h_r++
  :: else -> break
  od;
  h_r = 0;
  printf("%c: released its lease and claims\n", 65 + w)
}

inline shutdown(w) {
  crashes++;
  printf("%c: shuts down and restarts\n", 65 + w);
  gen_reset(w);
#if defined(MUTANT_SHUTDOWN_EARLY_RELEASE)
  if
  :: d_pc[w] == D_INFLIGHT && reachable(w) ->
     printf("%c: its cancelled post is still on its way\n", 65 + w);
     d_shut[w] = true
  :: else -> del_reset(w)
  fi;
#else
  if
  :: d_pc[w] == D_INFLIGHT && reachable(w) ->
     printf("%c: its delivery is cancelled after the post was sent\n", 65 + w);
     if
     :: d_step { reach(w) }
     :: printf("platform: the cancelled post never arrives\n")
     fi
  :: else
  fi;
  del_reset(w);
#endif
  release_owner(w)
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

/* A deliverer is cut off from the database (one of the stalls) while a part that is not the
   last is on its way. The post lands and returns; the renewals get no answer, so the claim
   expires, and its fence (2/3 of the TTL without a renewal) has ended before: the fence check
   stops it before the next part. The mutant posts the next part anyway. */
#define can_cut(w) \
  (stalls < MAXSTALL && d_pc[w] == D_INFLIGHT && !shut(w) && d_part[w] + 1 < NPART && \
   claim_held(w, d_row[w]) && reachable(w))

inline cut(w) {
  stalls++;
  printf("%c: cut off from the database while reply %d part %d is on its way\n",
         65 + w, d_row[w] + 1, d_part[w] + 1);
  reach(w);
  d_part[w]++;
  r_expired[d_row[w]] = true;
  printf("%c: cannot renew; its claim on reply %d expires\n", 65 + w, d_row[w] + 1);
#if defined(MUTANT_PARTITION)
  d_renew_failed[w] = true;
  printf("%c: posts reply %d part %d under a claim it cannot renew\n",
         65 + w, d_row[w] + 1, d_part[w] + 1)
#else
  printf("%c: its claim fence has ended: stops before part %d\n", 65 + w, d_part[w] + 1);
  del_reset(w)
#endif
}

#if defined(STREAMING)
#define ORPHAN(k) \
  :: atomic { orphan(k) -> \
       if \
       :: d_step { draft_lands(k) } \
       :: d_step { k_state[k] = K_LOST; printf("platform: draft %d never arrives\n", k) } \
       fi }
#define DELETE(k) :: d_step { deletable(k) -> person_deletes(k) }
#endif

proctype Chaos() {
end:
  do
  /* a busy worker process crashes and restarts at once; its lease and claim stay until they
     expire */
  :: atomic { crashes < MAXCRASH && busy(0) -> crash(0) }
  :: atomic { crashes < MAXCRASH && busy(1) -> crash(1) }
  /* or shuts down (SIGTERM) and restarts: its lease and claims are released at once */
  :: atomic { crashes < MAXCRASH && busy(0) && !shut(0) -> shutdown(0) }
  :: atomic { crashes < MAXCRASH && busy(1) && !shut(1) -> shutdown(1) }
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
  /* a deliverer is cut off from the database */
  :: d_step { can_cut(0) -> cut(0) }
  :: d_step { can_cut(1) -> cut(1) }
#if defined(STREAMING)
  /* a draft post nobody waits for lands, or never arrives */
  ORPHAN(1) ORPHAN(2) ORPHAN(3) ORPHAN(4) ORPHAN(5)
  /* a person deletes a draft that is not (yet) an answer */
  DELETE(1) DELETE(2) DELETE(3) DELETE(4) DELETE(5)
#if defined(DISCORD)
  /* Discord stops deduping a draft's nonce (never while a post with it is on its way: posts
     reach Discord or fail within a fence, minutes shorter than the window) */
  WINDOW_ENDS(1) WINDOW_ENDS(2) WINDOW_ENDS(3) WINDOW_ENDS(4) WINDOW_ENDS(5)
#endif
#endif
  od
}

init {
  atomic {
    run User();
    run Gen(0); run Del(0);
    run Gen(1); run Del(1);
    run Chaos();
#if defined(SPECULATE)
    run Time();
#endif
#if defined(STOP)
    run Person();
#endif
#if defined(STREAMING)
    run Quiet()
#endif
  }
}
