//! Postfix's two delegation protocols, without I/O: the SMTP access policy delegation
//! protocol (`check_policy_service`, Postfix's `SMTPD_POLICY_README`) and the milter
//! protocol (`smtpd_milters`, `non_smtpd_milters`; sendmail's libmilter protocol, version
//! 6, as Postfix speaks it).
//!
//! Beside them, what Postfix's own commands say of its queue (`postqueue -j`) and the line
//! its pickup writes for locally submitted mail, for held mail kept in Postfix's hold queue.
//!
//! Both protocols are parsed from bytes the front ends read and written into buffers they send; what
//! a request means to the policy is decided a floor above.

pub mod milter;
pub mod policy;
pub mod queue;
