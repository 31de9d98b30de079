// election.run(), without I/O: the state of one run and what each event of it means (the loop that
// campaigns, calls the work and resigns is election.js's).
//
// A run campaigns, and once elected calls the work with an AbortSignal of the term; resigns when
// the work returns; and campaigns again, until it is stopped. Decided here:
// - A term's signal aborts once, at the first of: leadership lost (the term's hold lost: a renewal
//   that found it gone, the lease clock run out, its connection closed), the run stopped, the work
//   returned. It aborts before the term is resigned, so a successor elected by the resignation
//   starts after it; a term lost before its work began aborts at once.
// - A stopped run campaigns no more; a stop aborts the signal of the term it interrupts.
// - onElected(term) once per term, before the work; onNewLeader(leader) once per change an observer
//   of the run saw ({ term, data }, or null: nobody leads), never after the run ended.
"use strict";

const { LockError } = require("./errors");
const { now } = require("./clock");

/** Why a term's signal aborted. */
const LOST = "lost";
const STOPPED = "stopped";
const RETURNED = "returned";

/** One term of a run and its AbortController, aborted once. */
class Term {
  constructor(term, name) {
    this.term = term;
    this.name = name;
    this.controller = new AbortController();
    /** Why it aborted (LOST, STOPPED, RETURNED), null while it has not. */
    this.why = null;
    /** When it aborted (now(), ms). */
    this.firedAt = null;
  }

  get signal() {
    return this.controller.signal;
  }

  /** Aborts the signal, the first time only (`reason`: the signal's reason): true then. */
  end(why, reason) {
    if (this.why !== null) return false;
    this.why = why;
    this.firedAt = now();
    this.controller.abort(reason || new LockError(`${this.name}: the term ended (${why})`, this.name));
    return true;
  }
}

class Run {
  constructor(name, { onElected = null, onNewLeader = null } = {}) {
    this.name = name;
    this.onElected = onElected;
    this.onNewLeader = onNewLeader;
    this.stopped = false;
    this.ended = false;
    /** The term now worked in, null between terms. */
    this.current = null;
    /** Every term of the run, in order. */
    this.terms = [];
  }

  /** Campaign (again): not stopped. */
  campaigning() {
    return !this.stopped;
  }

  /** No more campaigns; the term now worked in (if any) ends at once. */
  stop(reason) {
    this.stopped = true;
    if (this.current) this.current.end(STOPPED, reason);
  }

  /** The term `term` lost leadership (`reason`: the hold's LockLostError). */
  lost(term, reason) {
    term.end(LOST, reason);
  }

  /**
   * A term was granted: the Term to work in, aborted already if the run was stopped or it was lost
   * meanwhile (`leading()`, asked once the term is current).
   */
  elected(term, leading) {
    const started = new Term(term, this.name);
    this.current = started;
    this.terms.push(started);
    if (this.stopped) started.end(STOPPED);
    else if (!leading()) started.end(LOST);
    return started;
  }

  /** Start the work of `term`: not when it ended already (lost, stopped). */
  working(term) {
    return term.why === null;
  }

  /** The work of `term` returned (or threw): its signal aborts before the resignation. */
  finished(term) {
    term.end(RETURNED);
    if (this.current === term) this.current = null;
  }

  /** An observer of the run saw a change: call onNewLeader (not once the run ended). */
  seen() {
    return this.onNewLeader !== null && !this.ended;
  }

  /** The run is over: no more callbacks. */
  end() {
    this.ended = true;
    this.stopped = true;
  }
}

module.exports = { Run, Term, LOST, STOPPED, RETURNED };
