//! Starting and stopping the runtime: the first run, `tutti down`, the service units, the rules
//! every binary shares, the first mistakes.

mod down;
mod first_mistakes;
mod lifecycle;
mod service;
mod shared_rules;
mod skeleton;
