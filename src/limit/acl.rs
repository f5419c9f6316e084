//! Exim's ACLs (SMTP stages) and which `per_*` options each allows.

use super::per::PerMode;

/// The ACL (SMTP stage) a limit is evaluated in; decides Exim's "badacl" rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Acl {
    /// RCPT TO.
    Rcpt,
    /// MAIL FROM.
    Mail,
    /// Before DATA's 354.
    Predata,
    /// Each MIME part.
    Mime,
    /// DKIM.
    Dkim,
    /// End of DATA.
    Data,
    /// PRDR.
    Prdr,
    /// Non-SMTP message.
    NotSmtp,
    /// AUTH.
    Auth,
    /// ATRN.
    Atrn,
    /// Connection start.
    Connect,
    /// ETRN.
    Etrn,
    /// EXPN.
    Expn,
    /// EHLO or HELO.
    Helo,
    /// AUTH= on MAIL.
    MailAuth,
    /// Start of a non-SMTP message.
    NotSmtpStart,
    /// Connection lost.
    NotQuit,
    /// QUIT.
    Quit,
    /// STARTTLS.
    StartTls,
    /// WELLKNOWN.
    WellKnown,
    /// VRFY.
    Vrfy,
    /// Delivery time.
    Delivery,
    /// `${acl}` or unknown.
    Unknown,
}

impl Acl {
    /// Exim's name for this ACL in error messages.
    pub fn exim_name(self) -> &'static str {
        match self {
            Acl::Rcpt => "RCPT",
            Acl::Mail => "MAIL",
            Acl::Predata => "PREDATA",
            Acl::Mime => "MIME",
            Acl::Dkim => "DKIM",
            Acl::Data => "DATA",
            Acl::Prdr => "PRDR",
            Acl::NotSmtp => "non-SMTP",
            Acl::Auth => "AUTH",
            Acl::Atrn => "ATRN",
            Acl::Connect => "connection",
            Acl::Etrn => "ETRN",
            Acl::Expn => "EXPN",
            Acl::Helo => "EHLO or HELO",
            Acl::MailAuth => "MAILAUTH",
            Acl::NotSmtpStart => "non-SMTP-start",
            Acl::NotQuit => "NOTQUIT",
            Acl::Quit => "QUIT",
            Acl::StartTls => "STARTTLS",
            Acl::WellKnown => "WELLKNOWN",
            Acl::Vrfy => "VRFY",
            Acl::Delivery => "delivery",
            Acl::Unknown => "unknown",
        }
    }

    /// Whether this is one of Exim's message ACLs.
    pub(crate) fn is_message(self) -> bool {
        matches!(
            self,
            Acl::Rcpt
                | Acl::Mail
                | Acl::Predata
                | Acl::Mime
                | Acl::Dkim
                | Acl::Data
                | Acl::Prdr
                | Acl::NotSmtp
        )
    }

    /// Whether `per` is allowed here (otherwise it is forced readonly).
    pub(crate) fn allows(self, per: PerMode) -> bool {
        match per {
            PerMode::Mail | PerMode::Byte => self.is_message(),
            PerMode::Rcpt => self.is_message() && self != Acl::Mail,
            PerMode::Addr => self == Acl::Rcpt,
            PerMode::Cmd => true,
            PerMode::Conn => !matches!(self, Acl::NotSmtp | Acl::NotSmtpStart),
        }
    }
}
