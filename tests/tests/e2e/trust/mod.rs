//! Trust at install and at launch: the install trust step, install-time and file hardening, risk
//! levels and the launch allowlist.

mod governance;
mod hardening_files;
mod hardening_install;
mod install;
