//! An account's session: the logged-in client its ear and mouth share, and a new login when the
//! homeserver refuses its access token mid-run.
//!
//! A homeserver refuses a token (401 `M_UNKNOWN_TOKEN`, `soft_logout` or not) after an admin
//! logs the device out, a password change logs the other devices out, or the token expires.
//! An account configured with a password logs in again **on its fixed device** and carries on:
//! the ear from the sync position it holds (the store's), the mouth from the oldest unsent
//! outbox message. Nothing is read twice (the position only moves by a commit) and nothing is
//! sent twice: the mouth resends only a message whose send was refused or never acknowledged,
//! with the same transaction id from the same device id. (Synapse keys its transaction cache on
//! user and device, and keeps `event_txn_id_device_id` per device; a logout *deletes* the
//! device, and with it those rows — the in-memory cache still answers a repeat for 30 minutes.
//! A message sent just before such a logout whose acknowledgement was lost, and sent again more
//! than 30 minutes later, would be a second event: the window is a crash between send and ack.)
//!
//! An account configured with an access token cannot log in by itself. At the refusal it reads
//! its token again from where it was configured ([`Account::reread`]: its file): a new token
//! there, checked to be the account's on its fixed device, replaces the refused one and the
//! account carries on, with no restart. Otherwise the refusal becomes
//! [`MatrixError::TokenRefused`], which says to configure a new token, and is shown as the
//! account's failure until it is (read again at the next refusal, every 30 s, or at a restart).
//! The same holds for a refusal at the account's open (a token revoked while muninn was
//! stopped): each try of the open reads the credential again.
//! A password account reads its password again the same way before each new login: a password
//! changed by its owner and written to the file is taken too.
//!
//! Both the ear and the mouth may meet the refusal at once; one login serves both. Each reads
//! the token's generation before its call, and a renewal asked for a generation already
//! replaced does nothing.

use crate::client::MatrixClient;
use crate::config::{Account, Credential};
use crate::error::MatrixError;

/// The account's shared client and what it takes to log it in again.
pub(crate) struct Session {
    client: MatrixClient,
    homeserver: String,
    account: Account,
    /// Held while logging in again, so that one refusal makes one login.
    renewing: tokio::sync::Mutex<()>,
}

impl Session {
    /// Logs `account` in on its fixed device: with the password, or with a token checked to be
    /// the account's and the device's. The credential is read again (from its file, if it has
    /// one) at each try: an open refused for a stale token or password is tried again with
    /// what the file holds then, as a refusal mid-run is.
    pub(crate) async fn open(homeserver: &str, account: &Account) -> Result<Session, MatrixError> {
        let client = MatrixClient::new(homeserver)?;
        let credential = credential(account)?;
        let client = match &credential {
            Credential::Password(_) => {
                let account = Account {
                    credential: credential.clone(),
                    ..account.clone()
                };
                let token = password_login(&client, &account).await?;
                client.with_token(&token)
            }
            Credential::AccessToken(token) => {
                let client = client.with_token(token.expose());
                check_token(&client, account).await?;
                client
            }
        };
        Ok(Session {
            client,
            homeserver: homeserver.to_owned(),
            account: account.clone(),
            renewing: tokio::sync::Mutex::new(()),
        })
    }

    /// The logged-in client (clones share its token).
    pub(crate) fn client(&self) -> &MatrixClient {
        &self.client
    }

    /// After the homeserver refused the token of `generation` (read before the refused call):
    /// logs in again with the password, unless that token was replaced meanwhile. An access
    /// token account cannot: [`MatrixError::TokenRefused`].
    pub(crate) async fn renew(
        &self,
        generation: u64,
        refused: &MatrixError,
    ) -> Result<(), MatrixError> {
        let _one_login = self.renewing.lock().await;
        if self.client.token_generation() != generation {
            return Ok(());
        }
        let (mind, device) = (&self.account.mind, &self.account.device_id);
        match self.login_again(refused).await {
            Ok(()) => {
                tracing::warn!(%mind, %device, %refused,
                    "matrix: the homeserver refused the access token; logged in again on the same device");
                Ok(())
            }
            Err(error) => {
                // Logged here, once per try, whoever asked: the callers log the refused call.
                tracing::error!(%mind, %device, %refused, %error,
                    "matrix: the homeserver refused the access token and the account cannot log in again");
                Err(error)
            }
        }
    }

    /// A new login with the password (read again if it can be), or the access token read
    /// again if it changed.
    async fn login_again(&self, refused: &MatrixError) -> Result<(), MatrixError> {
        let fresh = MatrixClient::new(&self.homeserver)?;
        let credential = credential(&self.account)?;
        match credential {
            Credential::Password(_) => {
                let account = Account {
                    credential,
                    ..self.account.clone()
                };
                let token = password_login(&fresh, &account).await?;
                self.client.replace_token(&token);
                Ok(())
            }
            Credential::AccessToken(token) if !self.client.has_token(token.expose()) => {
                let fresh = fresh.with_token(token.expose());
                check_token(&fresh, &self.account).await?;
                self.client.replace_token(token.expose());
                Ok(())
            }
            Credential::AccessToken(_) => Err(token_refused(refused)),
        }
    }
}

/// The account's credential as it is now: read again from its file, or as configured.
fn credential(account: &Account) -> Result<Credential, MatrixError> {
    let Some(reread) = &account.reread else {
        return Ok(account.credential.clone());
    };
    let secret = reread
        .read()
        .map_err(|e| MatrixError::Config(format!("cannot read the credential again: {e}")))?;
    Ok(match &account.credential {
        Credential::Password(_) => Credential::Password(secret),
        Credential::AccessToken(_) => Credential::AccessToken(secret),
    })
}

/// A password login on the account's fixed device; returns the access token.
async fn password_login(client: &MatrixClient, account: &Account) -> Result<String, MatrixError> {
    let Credential::Password(password) = &account.credential else {
        return Err(MatrixError::Config("no password to log in with".to_owned()));
    };
    let login = client
        .login(&account.user_id, password.expose(), &account.device_id)
        .await?;
    if login.user_id != account.user_id || login.device_id != account.device_id {
        return Err(MatrixError::Config(format!(
            "logged in as {} on device {}, configured {} on {}",
            login.user_id, login.device_id, account.user_id, account.device_id
        )));
    }
    Ok(login.access_token)
}

/// Checks that the client's token is the account's, on its fixed device.
async fn check_token(client: &MatrixClient, account: &Account) -> Result<(), MatrixError> {
    let me = client
        .whoami()
        .await
        .map_err(|e| match e.is_unauthorized() {
            true => token_refused(&e),
            false => e,
        })?;
    if me.user_id != account.user_id {
        return Err(MatrixError::Config(format!(
            "the access token is {}'s, configured {}",
            me.user_id, account.user_id
        )));
    }
    if let Some(device) = me.device_id.filter(|d| *d != account.device_id) {
        return Err(MatrixError::Config(format!(
            "the access token is device {device}'s, configured {}: transaction ids \
             (idempotent sends) are scoped per device",
            account.device_id
        )));
    }
    Ok(())
}

/// The refusal of a configured access token, in words that say what to do.
fn token_refused(refused: &MatrixError) -> MatrixError {
    match refused {
        MatrixError::Refused {
            errcode, message, ..
        } => MatrixError::TokenRefused {
            errcode: errcode.clone(),
            message: message.clone(),
        },
        other => MatrixError::TokenRefused {
            errcode: String::new(),
            message: other.to_string(),
        },
    }
}
