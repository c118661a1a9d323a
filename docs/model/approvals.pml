/*
 * Approvals: the click world of a parked burst (docs/controls.md#approve-and-deny;
 * bot/core/approvals.py, storage/approvals.py, the engine's rule 9).
 *
 * The world starts where the park left it: the burst (version 1) is parked behind a card whose
 * action waits; no lease is held; the timer waits for the card's expiry. Then, in any order:
 *   - two presses on the card (the first an Approve, the second Approve or Deny), each delivered
 *     up to twice (a platform retry, or to the other process);
 *   - one newer message, or none; one wake-up of the timer with nothing decided, or none;
 *   - the card's expiry (the clock);
 *   - two workers, which serve the conversation whenever its timer is due, may crash (their
 *     lease stays until it lapses) or stall (they go on after their lease lapsed and another
 *     took it over);
 *   - the tool server, which counts every call with an effect it receives.
 *
 * Each step is one transaction of storage/approvals.py (or the server's call):
 *   press        insert_click (a stored click id: a duplicate, nothing changes), decide_approval
 *                (waiting, not expired, no newer input), wake_parked (due now); a denial's
 *                ending queued in the same transaction
 *   newer input  bump_version, arm_timer (due)
 *   expiry       the database's clock passes approval_expires_at
 *   acquire      acquire_lease (free, or a lapsed one taken over: the token grows)
 *   read         parked_action (the action's state) with the lease's version
 *   supersede    end_approval('superseded'), fenced by the token, with the card's ending
 *   expire       end_approval('expired'), fenced, only once the expiry passed, with the ending
 *   keep waiting lock_approval, then park_timer only while still waiting, release_lease
 *   claim        claim_approved: approved -> running, fenced by the token
 *   call         the server makes the call (its effect)
 *   finish       finish_approved: the result, once, with the card's ending
 *   unknown      end_card: a running call without a result ends its card (may have run), once
 *   commit       final check (fenced, version current) + the answer
 *
 * Properties (each an assertion named after its guarantee; -DONLY=n keeps those of Gn):
 *   G14_action_at_most_once       the server counts at most one call
 *   G16_one_decision              at most one press decides the card
 *   G16_only_approved_runs        a call runs only after an Approve decided it
 *   G16_newer_input_wins          newer input before any decision: the call never runs
 *   G16_expiry_wins               the expiry before any decision: the call never runs
 *   G16_card_ends                 when all is settled the card shows its outcome, and the
 *                                 burst (or the newer one) is answered
 *   G16_decision_served           (-DLATE_CLOCK: time passes only when nothing else can happen)
 *                                 a decided card's burst is answered before its expiry
 *   G16_card_tells_the_truth      a card ends "may have run" only for a call that was claimed
 *
 * Mutants (each must yield a counterexample for the property named):
 *   MUTANT_APPROVE_WITHOUT_CAS      a press decides whatever the state            G16_one_decision
 *   MUTANT_APPROVE_IGNORES_VERSION  a press decides after newer input: the newer  G16_card_ends
 *                                   burst is answered, the stale card never ends
 *   MUTANT_APPROVE_IGNORES_EXPIRY   a press decides after the expiry              G16_expiry_wins
 *   MUTANT_CLAIM_WITHOUT_CAS        a running call is claimed again               G14_action_at_most_once
 *   MUTANT_KEEP_WAITING_BLIND       keep waiting parks the timer even when a      G16_decision_served
 *                                   press decided meanwhile (-DLATE_CLOCK)
 *   MUTANT_LOST_CLAIM_SAYS_UNKNOWN  a worker whose claim failed because its lease  G16_card_tells_the_truth
 *                                   was gone ends the card as "may have run"
 */

#define WAITING    1
#define APPROVED   2
#define DENIED     3
#define EXPIRED    4
#define SUPERSEDED 5
#define RUNNING    6
#define ASKED_AT   1   /* the version the card asked at (the action's to_version) */
#define E_RESULT     1  /* approved by NAME: the result's first line */
#define E_DENIED     2
#define E_EXPIRED    3
#define E_SUPERSEDED 4
#define E_UNKNOWN    5  /* approved; its outcome is unknown (it may have run) */

#ifndef MAXCRASH
#define MAXCRASH 1
#endif
#ifndef MAXSTALL
#define MAXSTALL 1
#endif

#if !defined(ONLY) || ONLY == 14
#define CHECK_G14 assert(G14_action_at_most_once)
#else
#define CHECK_G14 skip
#endif
#if !defined(ONLY) || ONLY == 16
#define CHECK_G16(p) assert(p)
#else
#define CHECK_G16(p) skip
#endif

byte approval = WAITING;
byte version = ASKED_AT;
byte answered = 0;
byte owner = 0;            /* the lease's holder (a worker's id), 0: free */
byte token = 0;            /* the fencing token: only grows */
bool lapsed = false;       /* the lease ran out (its holder crashed or stalled) */
bool due = false;          /* the timer is due now; false: at the expiry */
bool time_up = false;      /* the database's clock passed the card's expiry */
bool finished = false;     /* the call's result is recorded */
byte ending = 0;           /* the card's ending, queued once (its outbox slot): E_... */
byte effects = 0;          /* calls with an effect the server received */
byte decisions = 0;        /* presses that decided the card */
bool stored[2];            /* the presses stored, by platform click id */
bool approved = false;     /* an Approve decided the card */
bool newer_first = false;  /* newer input came while the card was undecided */
bool expired_first = false;/* the expiry passed while the card was undecided */
byte crashes = 0;
byte stalls = 0;

bool G14_action_at_most_once = true;
bool G16_one_decision = true;
bool G16_only_approved_runs = true;
bool G16_newer_input_wins = true;
bool G16_expiry_wins = true;
bool G16_card_ends = true;
bool G16_decision_served = true;
bool G16_card_tells_the_truth = true;

#if defined(MUTANT_APPROVE_WITHOUT_CAS)
#define DECIDES (approval != SUPERSEDED && approval != EXPIRED && !time_up && version == ASKED_AT)
#elif defined(MUTANT_APPROVE_IGNORES_VERSION)
#define DECIDES (approval == WAITING && !time_up)
#elif defined(MUTANT_APPROVE_IGNORES_EXPIRY)
#define DECIDES (approval == WAITING && version == ASKED_AT)
#else
#define DECIDES (approval == WAITING && !time_up && version == ASKED_AT)
#endif

#define FENCED(t) (owner == me && token == t)

#if defined(MUTANT_CLAIM_WITHOUT_CAS)
#define CLAIMABLE(a) (a == APPROVED || a == RUNNING)
#define CLAIMS(t) (FENCED(t) && (approval == APPROVED || approval == RUNNING))
#else
#define CLAIMABLE(a) (a == APPROVED)
#define CLAIMS(t) (FENCED(t) && approval == APPROVED)
#endif

#if defined(MUTANT_KEEP_WAITING_BLIND)
#define STILL_WAITING true
#else
#define STILL_WAITING (approval == WAITING)
#endif

/* the card's ending, queued once (its outbox slot): what it says */
#define END_CARD(e) if :: ending == 0 -> ending = e :: else -> skip fi

/* one delivery of press `c` (kind APPROVED or DENIED): the store's one transaction */
inline press(c, kind) {
  atomic {
    if
    :: stored[c] -> skip  /* a duplicate: nothing changes, the ack alone answers it */
    :: else ->
       stored[c] = true;
       if
       :: DECIDES ->
          decisions++;
          G16_one_decision = (decisions <= 1);
          CHECK_G16(G16_one_decision);
          approval = kind;
          approved = approved || kind == APPROVED;
          due = true;
          if
          :: kind == DENIED -> END_CARD(E_DENIED)
          :: else -> skip
          fi
       :: else -> skip  /* decided, stale or expired: told to the clicker alone */
       fi
    fi
  }
}

proctype Presses() {
  byte second;
  if
  :: second = APPROVED
  :: second = DENIED
  fi;
  do
  :: true -> press(0, APPROVED)
  :: true -> press(0, APPROVED)  /* delivered again (dedupe by the click id) */
  :: true -> press(1, second)
  :: true -> press(1, second)
  :: break
  od
}

proctype Person() {
  if
  :: atomic {
       version++;
       due = true;
       newer_first = newer_first || approval == WAITING
     }
  :: skip
  fi
}

/* a wake-up with nothing decided (a lease-conflict retry, a restart restoring its timers): the
   worker finds the card still waiting */
proctype Wake() {
  if
  :: due = true
  :: skip
  fi
}

/* -DLATE_CLOCK: the expiry comes only once nothing else can happen, so a decided burst that
   waits for it is seen (G16_decision_served); otherwise it may come at any point */
proctype Clock() {
#if defined(LATE_CLOCK)
  timeout;
  G16_decision_served = !(decisions > 0 && answered < version);
  CHECK_G16(G16_decision_served);
#endif
  atomic {
    time_up = true;
    expired_first = expired_first || approval == WAITING
  }
  /* everything settled: the card shows its outcome and the input is answered */
  timeout;
  G16_card_ends = (ending != 0 && answered == version);
  CHECK_G16(G16_card_ends)
}

/* a worker gives up its lease (on its way out) only if it still holds it */
#define RELEASE(t) if :: FENCED(t) -> owner = 0 :: else -> skip fi

/* a crash: the worker's local state is lost; its lease stays until it lapses */
#define CRASH_POINT \
  if \
  :: crashes < MAXCRASH -> atomic { crashes++; lapsed = (owner == me) || lapsed }; goto end_idle \
  :: skip \
  fi

proctype Worker(byte me) {
  byte t, a, v;
  bool claimed;
end_idle:
  do
  :: atomic {
       answered < version && (due || time_up) && (owner == 0 || lapsed) ->
       owner = me; token++; t = token; lapsed = false
     }
     atomic { a = approval; v = version };  /* parked_action, the lease's version */
     CRASH_POINT;
     if
     :: stalls < MAXSTALL -> atomic { stalls++; lapsed = true }  /* it stalls: taken over */
     :: skip
     fi;
     if
     :: a == WAITING && v > ASKED_AT ->  /* newer input: the card is stale */
        atomic {
          if
          :: FENCED(t) && approval == WAITING -> approval = SUPERSEDED; END_CARD(E_SUPERSEDED)
          :: else -> skip
          fi
        }
     :: a == WAITING && v == ASKED_AT ->
        atomic {
          claimed = false;
          if
          :: FENCED(t) && approval == WAITING && time_up ->
             approval = EXPIRED; END_CARD(E_EXPIRED); claimed = true
          :: else ->  /* still waiting: parked again (unless decided or newer input), released */
             if
             :: STILL_WAITING && version == v -> due = false
             :: else -> skip
             fi;
             RELEASE(t)
          fi
        };
        if
        :: !claimed -> goto end_idle
        :: else -> skip
        fi
     :: CLAIMABLE(a) ->
        atomic {
          claimed = CLAIMS(t);
          if
          :: claimed -> approval = RUNNING
          :: else -> skip
          fi
        };
        if
        :: claimed ->
           CRASH_POINT;
           atomic {  /* the server makes the call */
             effects++;
             G14_action_at_most_once = (effects <= 1);
             CHECK_G14;
             G16_only_approved_runs = approved;
             CHECK_G16(G16_only_approved_runs);
             G16_newer_input_wins = !newer_first;
             CHECK_G16(G16_newer_input_wins);
             G16_expiry_wins = !expired_first;
             CHECK_G16(G16_expiry_wins)
           };
           CRASH_POINT;
           atomic {  /* finish_approved: the result once, with the ending */
             if
             :: !finished -> finished = true; END_CARD(E_RESULT)
             :: else -> skip
             fi
           }
        :: else ->
           atomic {
             if
             :: approval == RUNNING && !finished ->  /* another claimed it: may have run */
                G16_card_tells_the_truth = (approval == RUNNING);
                CHECK_G16(G16_card_tells_the_truth);
                END_CARD(E_UNKNOWN)
             :: approval == RUNNING -> skip  /* given as recorded */
#if defined(MUTANT_LOST_CLAIM_SAYS_UNKNOWN)
             :: else ->  /* nobody claimed it, yet the card is ended as "may have run" */
                G16_card_tells_the_truth = (approval == RUNNING);
                CHECK_G16(G16_card_tells_the_truth);
                END_CARD(E_UNKNOWN);
                RELEASE(t)
#else
             :: else -> RELEASE(t)  /* nobody claimed it: our lease is gone; the next serves */
#endif
             fi
           };
           if
           :: approval != RUNNING -> goto end_idle
           :: else -> skip
           fi
        fi
     :: a == RUNNING && !CLAIMABLE(a) ->
        atomic {
          if
          :: !finished ->  /* no result: may have run; end_card, once */
             G16_card_tells_the_truth = (approval == RUNNING);
             CHECK_G16(G16_card_tells_the_truth);
             END_CARD(E_UNKNOWN)
          :: else -> skip
          fi
        }
     :: a == DENIED || a == EXPIRED || a == SUPERSEDED -> skip
     fi;
     CRASH_POINT;
     atomic {  /* the final check and the answer, fenced; version current */
       if
       :: FENCED(t) && answered < version && approval != WAITING ->
          answered = version; owner = 0
       :: else -> RELEASE(t)
       fi
     }
  od
}

init {
  atomic {
    run Presses();
    run Person();
    run Wake();
    run Clock();
    run Worker(1);
    run Worker(2)
  }
}
